"""The dashboard's polls, on one thread of their own (issue 13: the idle dashboard's CPU).

Dolphie's rule stays: fetch off the UI thread, render on it, and wait the interval only after the
last result was rendered, so polls never pile up and the UI never waits on the hub. A Textual thread
worker per poll cost, every second: a Worker and its three state-change messages dispatched through
the App, a thread-pool submit, a timer task to arm the next one, and a coroutine with a future the
thread blocked on (`call_from_thread`). Here one long-lived thread hands each result to the UI loop
with `call_soon_threadsafe` and waits on two events.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any


class Poller:
    """`fetch()` on this thread, then `deliver(result)` on the UI loop (or `failed(error)` when the
    fetch raised: no more polls, as a Textual worker's error ends the app); the next fetch comes
    `interval_s()` after the UI said `rendered()`, or at once after `now()`."""

    def __init__(self, fetch: Callable[[], Any], deliver: Callable[[Any], None], failed: Callable[[Exception], None],
                 loop: asyncio.AbstractEventLoop, interval_s: Callable[[], float]) -> None:
        self._fetch, self._deliver, self._failed, self._loop = fetch, deliver, failed, loop
        self._interval_s = interval_s
        self._wake = threading.Event()  # poll now, without waiting out the interval
        self._rendered = threading.Event()  # the last result was rendered: the interval may start
        self._stopped = False
        self.polls = 0  # fetches made (tests count them)
        self._thread = threading.Thread(target=self._run, name="gpumix-poll", daemon=True)

    def start(self) -> None:
        self._wake.set()  # the first poll at once
        self._thread.start()

    def now(self) -> None:
        """Poll as soon as the last result is rendered (a poll under way: one more after it)."""
        self._wake.set()

    def rendered(self) -> None:
        self._rendered.set()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        self._rendered.set()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        # daemon: a fetch blocked on a frozen hub never holds the app's exit
        while True:
            self._wake.wait(self._interval_s())
            if self._stopped:
                return
            self._wake.clear()  # a now() during the fetch below polls once more after it
            self._rendered.clear()
            try:
                result = self._fetch()
            except Exception as error:  # noqa: BLE001 - handed to the app, as a worker's would be
                self._call(self._failed, error)
                return
            self.polls += 1
            if self._stopped or not self._call(self._deliver, result):
                return
            self._rendered.wait()

    def _call(self, callback: Callable[[Any], None], argument: Any) -> bool:
        try:
            self._loop.call_soon_threadsafe(callback, argument)
        except RuntimeError:  # the loop is closed: the app has gone
            return False
        return True
