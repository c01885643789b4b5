"""One way to wait, for tests and benchmarks: poll a condition until it holds or a deadline passes.

Never a fixed sleep that hopes the condition holds by then: on a loaded box it does not, on a fast
one it wastes the time. Benchmarks import it too (`from tests.waiting import wait_until`, with the
repository root on sys.path).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

POLL_S = 0.01


def wait_until(predicate: Callable[[], Any], timeout_s: float = 5.0, what: str | None = None,
               poll_s: float = POLL_S) -> Any:
    """Poll `predicate` until it is truthy or `timeout_s` passed; its last value. With `what`, a
    deadline passed raises TimeoutError naming it (for callers that cannot go on without it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            if what is not None:
                raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
            return value
        time.sleep(poll_s)


async def wait_until_async(predicate: Callable[[], Any], timeout_s: float = 5.0, what: str | None = None,
                           pause: Callable[[float], Awaitable[Any]] | None = None,
                           poll_s: float = POLL_S) -> Any:
    """The same inside an event loop (a Textual pilot: pass `pilot.pause`), so the app runs meanwhile."""
    pause = pause or asyncio.sleep
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            if what is not None:
                raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
            return value
        await pause(poll_s)


STEP_WORK_S = 5e-6  # a test step's own work: an empty step can end under the hub's least step time (1 µs)


def step_work(seconds: float = STEP_WORK_S) -> None:
    """Spin for a test step's work, so that the hub keeps the step (it drops one timed under 1 µs)."""
    until_s = time.perf_counter() + seconds
    while time.perf_counter() < until_s:
        pass

