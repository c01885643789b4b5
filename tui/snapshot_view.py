"""The one way a snapshot reaches a screen: `SnapshotView.receive`, called by the app.

A screen is drawn into only while it is mounted and not closing: a screen pushed a moment ago
has no widgets yet, and one being popped is losing them (issue 12: keys pressed fast crashed the
monitor with `NoMatches`). A view draws the app's latest snapshot itself once it is mounted.
"""

from __future__ import annotations

from typing import Any

from textual.screen import Screen


def can_draw(screen: Screen[Any]) -> bool:
    """Mounted, attached and not on its way out: its widgets are there to be updated."""
    return (screen.is_mounted and screen.is_attached and not screen._closing and not screen._closed
            and not screen._pruning)


class SnapshotView(Screen[None]):
    """A screen that shows snapshots. Subclasses implement `show`; nobody else calls it."""

    def show(self, snapshot: dict[str, Any]) -> None:
        raise NotImplementedError

    def receive(self, snapshot: dict[str, Any]) -> bool:
        """Draw `snapshot` if this screen can be drawn into now; True when it was drawn."""
        if not can_draw(self):
            return False
        self.show(snapshot)
        return True

    def on_mount(self) -> None:
        # the latest picture at once, not at the next poll
        self.call_after_refresh(self._show_latest)

    def _show_latest(self) -> None:
        latest = getattr(self.app, "snapshot", None)
        if latest is not None:
            self.receive(latest)
