"""Blocking calls run side by side on a few kept threads: NVML's PCIe throughput window
(nvmlDeviceGetPcieThroughput samples for 20 ms, two calls a GPU) for every GPU of a tick at once, where
the counters cannot answer (since session 11 a busy GPU's rate comes from a pair of counter reads).

concurrent.futures' pool made a Future (with its Condition), a work item and a semaphore check per call in
Python, and woke its workers through them: on `gpumix hub --sim mixed-10`, whose 9 busy GPUs take the window
every tick, ~0.2 ms of the process's CPU a tick of ~1.3 (issue 13: the hub at <= 0.5 % of a core). Here a call
is one queue put; the last call to finish releases the one lock the caller waits on.

What it may import: the standard library.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

Call = tuple[Callable[..., Any], tuple[Any, ...]]


class _Batch:
    """One run's results and how many calls are still out; `done` is released by the last one."""

    __slots__ = ("done", "left", "lock", "results")

    def __init__(self, size: int) -> None:
        self.results: list[tuple[bool, Any]] = [(True, None)] * size  # (returned, value or exception)
        self.left = size
        self.lock = threading.Lock()
        self.done = threading.Lock()
        self.done.acquire()


class CallPool:
    """`run(calls)`: every call at once (at most `max_workers` side by side), their results in order."""

    def __init__(self, max_workers: int = 16, thread_name_prefix: str = "pool") -> None:
        self._max_workers = max_workers
        self._prefix = thread_name_prefix
        self._jobs: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...], int, _Batch] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._closed = False

    def run(self, calls: Sequence[Call]) -> list[Any]:
        """Each call's value, in the calls' order; the first (in that order) that raised is raised here,
        once all are done, as a Future's result() would."""
        if self._closed:
            raise RuntimeError("cannot run calls after shutdown")
        if not calls:
            return []
        while len(self._threads) < min(len(calls), self._max_workers):
            thread = threading.Thread(target=self._work, name=f"{self._prefix}_{len(self._threads)}", daemon=True)
            thread.start()
            self._threads.append(thread)
        batch = _Batch(len(calls))
        put = self._jobs.put
        for slot, (function, args) in enumerate(calls):
            put((function, args, slot, batch))
        batch.done.acquire()
        values = []
        for returned, value in batch.results:
            if not returned:
                raise value
            values.append(value)
        return values

    def _work(self) -> None:
        get = self._jobs.get
        while (job := get()) is not None:
            function, args, slot, batch = job
            try:
                batch.results[slot] = (True, function(*args))
            except BaseException as error:  # handed to the caller, as a Future would
                batch.results[slot] = (False, error)
            with batch.lock:
                batch.left -= 1
                if not batch.left:
                    batch.done.release()

    def shutdown(self) -> None:
        """The workers end once the calls already queued are done; nothing waits for them."""
        self._closed = True
        for _ in self._threads:
            self._jobs.put(None)
