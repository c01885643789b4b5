"""A hub that stops answering: said once, the title counting the seconds, the last values dimmed;
said again when it is back. A mixin of the App (gpumix.tui.app), on its own timer: a fetch blocked on
a frozen hub arms no next poll, so the poll chain cannot be the one to notice."""

from __future__ import annotations

import time
from typing import Any

from gpumix.tui.panels import stale_line, title_line

STALE_AFTER_INTERVALS = 2  # polls without a snapshot before the hub counts as lost
MIN_STALE_S = 1.0  # but never sooner: a busy box may take a moment to answer
STALE_CHECK_S = 0.5


class StaleWatch:
    """Needs from the App: interval_s, snapshot, source, screen_stack, main_screen, say, _set_text,
    add_class/remove_class, and `_received_at_s` set when a snapshot comes."""

    interval_s: float
    snapshot: dict[str, Any] | None
    source: Any
    stale = False  # no snapshot for stale_after_s: the title says so, values dimmed
    _received_at_s = 0.0

    @property
    def stale_after_s(self) -> float:
        return max(STALE_AFTER_INTERVALS * self.interval_s, MIN_STALE_S)

    def _check_stale(self) -> None:
        """On its own timer: a fetch blocked on a frozen hub arms no next poll, so the poll chain
        cannot be the one to notice."""
        age_s = time.monotonic() - self._received_at_s
        if age_s <= self.stale_after_s or not self.screen_stack or not self.main_screen.query("#title"):
            return  # fresh, or the app is closing
        if not self.stale:
            self.stale = True
            self.add_class("-stale")
            self.say("hub lost — reconnecting", severity="warning", timeout=4)
        self._set_text("#title", stale_line(age_s, self._source_error()))

    def _recovered(self) -> None:
        if not self.stale:
            return
        self.stale = False
        self.remove_class("-stale")
        self.say(f"hub back after {time.monotonic() - self._received_at_s:.0f} s without a snapshot", timeout=4)
        if self.snapshot is not None:
            self._set_text("#title", title_line(self.snapshot))

    def _source_error(self) -> str | None:
        """Why the source could not be read (a HubClient's last_error; each of several hubs')."""
        sources = getattr(self.source, "sources", [self.source])
        reasons = [error for error in (getattr(s, "last_error", None) for s in sources) if error]
        return "; ".join(reasons) or None
