"""A hub that stops answering, or answers with the same readings (its sampler hung): said once, the
title counting the seconds, the last values dimmed; said again when readings come back. A mixin of the
App (gpumix.tui.app), on its own timer: a fetch blocked on a frozen hub arms no next poll, so the poll
chain cannot be the one to notice. The title's clock shows minutes only (issue 13: its seconds rewrote
the title every second), so a snapshot whose stamp does not move must be noticed here."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from gpumix.tui.panels import frozen_line, stale_line, title_line

STALE_AFTER_INTERVALS = 2  # polls without a snapshot before the hub counts as lost
MIN_STALE_S = 1.0  # but never sooner: a busy box may take a moment to answer
FROZEN_AFTER_READINGS = 3  # the hub's reading intervals without a new reading: a tick late by a second on a
# loaded box, or an NVML hiccup, is not a frozen hub
MAX_SPACING_S = 60.0  # a hub's readings further apart than this still count as lost after 2 minutes
STALE_CHECK_S = 0.5  # while stale: the title's count of seconds moves on
MIN_CHECK_S = 0.05  # never re-armed sooner (a check due now)


class StaleWatch:
    """Needs from the App: _context, _handle_exception, interval_s, snapshot, source, screen_stack, _dashboard_widget, say, _set_text,
    add_class/remove_class, and `_received_at_s` set when a snapshot comes."""

    interval_s: float
    snapshot: dict[str, Any] | None
    source: Any
    stale = False  # no snapshot for stale_after_s: the title says so, values dimmed
    _received_at_s = 0.0

    WATCH_READINGS = True  # False where a snapshot may repeat on purpose (a paused replay)
    _stamp_s: float | None = None  # the newest readings' timestamp_s
    _stamp_spacing_s = 0.0  # between the hub's last two readings: a hub ticking slower than we poll
    _answered_at_s = 0.0  # when the source last answered, with new readings or not (monotonic s)

    @property
    def stale_after_s(self) -> float:
        return max(STALE_AFTER_INTERVALS * self.interval_s, FROZEN_AFTER_READINGS * self._stamp_spacing_s, MIN_STALE_S)

    def _snapshot_came(self, snapshot: dict[str, Any]) -> None:
        """A snapshot came: fresh only if its readings are new (its stamp moved), once the hub's spacing
        is known (two stamps seen: a hub at --interval 5 repeats its stamp to a 1 s poll)."""
        self._answered_at_s = time.monotonic()
        stamp = snapshot.get("timestamp_s")
        if self.WATCH_READINGS and isinstance(stamp, float | int) and math.isfinite(stamp):
            if stamp == self._stamp_s and self._stamp_spacing_s > 0:
                return
            if self._stamp_s is not None and stamp > self._stamp_s:
                self._stamp_spacing_s = min(stamp - self._stamp_s, MAX_SPACING_S)
            self._stamp_s = stamp
        self._recovered()
        self._received_at_s = time.monotonic()

    stale_checks = 0  # how often the check ran (tests count the wake-ups)

    def _check_stale(self) -> None:
        """On its own one-shot timer: a fetch blocked on a frozen hub arms no next poll, so the poll
        chain cannot be the one to notice. While fresh it wakes only when the newest snapshot would
        turn stale (not every STALE_CHECK_S: about once a snapshot instead of twice a second)."""
        self.stale_checks += 1
        age_s = time.monotonic() - self._received_at_s
        if not self.screen_stack:
            return  # the app is closing
        if age_s <= self.stale_after_s:
            self._arm_stale_check(self.stale_after_s - age_s)
            return
        self._arm_stale_check(STALE_CHECK_S)
        if self._dashboard_widget("#title") is None:  # type: ignore[attr-defined]
            return  # the app is closing
        answering = time.monotonic() - self._answered_at_s <= self.stale_after_s
        if not self.stale:
            self.stale = True
            self.add_class("-stale")
            self.say("no new readings from the hub" if answering else "hub lost — reconnecting",
                     severity="warning", timeout=4)
        self._set_text("#title", frozen_line(age_s) if answering else stale_line(age_s, self._source_error()))

    _stale_handle: asyncio.TimerHandle | None = None

    def _arm_stale_check(self, delay_s: float) -> None:
        """The next check `delay_s` from now (the one armed before, if any, dropped). A call on the
        loop, not a Textual timer: set_timer made a Timer, a task and a callback's signature
        inspection for each snapshot (issue 13: the idle dashboard's CPU)."""
        self._cancel_stale_check()
        self._stale_handle = asyncio.get_running_loop().call_later(max(delay_s, MIN_CHECK_S), self._stale_check_due)

    def _cancel_stale_check(self) -> None:
        if self._stale_handle is not None:
            self._stale_handle.cancel()
            self._stale_handle = None

    def _stale_check_due(self) -> None:
        """On the loop, in the app's context (as a timer's callback ran); an error ends the app with
        its traceback, as it did from a timer."""
        self._stale_handle = None
        with self._context():  # type: ignore[attr-defined]
            try:
                self._check_stale()
            except Exception as error:  # noqa: BLE001 - Textual's own handler shows it and exits
                self._handle_exception(error)  # type: ignore[attr-defined]

    def _recovered(self) -> None:
        if not self.stale:
            return
        self.stale = False
        self.remove_class("-stale")
        self.say(f"hub back after {time.monotonic() - self._received_at_s:.0f} s without new readings", timeout=4)
        if self.snapshot is not None:
            self._set_text("#title", title_line(self.snapshot))

    def _source_error(self) -> str | None:
        """Why the source could not be read (a HubClient's last_error; each of several hubs')."""
        sources = getattr(self.source, "sources", [self.source])
        reasons = [error for error in (getattr(s, "last_error", None) for s in sources) if error]
        return "; ".join(reasons) or None
