"""The selected GPU's history as the dashboard draws it: renewed every few snapshots, not each one.

Every new sample shifts a sparkline or a chart by a column, so each of their lines changes and is
written to the terminal again: at 160x48 on one GPU the detail panel's charts were most of the
bytes (issue 13). The dashboard's numbers still change with every snapshot; its sparklines and
charts take the newest history every EVERY_SNAPSHOTS snapshots (5 s at the default 1 s interval),
advancing by that many samples at once, and at once when the selected GPU changes. The charts
screen (enter) draws every sample.
"""

from __future__ import annotations

from collections.abc import Hashable

EVERY_SNAPSHOTS = 5

Series = dict[tuple[int, str], list[float | None]]


class HeldHistory:
    def __init__(self, every: int = EVERY_SNAPSHOTS) -> None:
        self.every = max(1, every)
        self._held: Series = {}
        self._since = 0  # snapshots since the history was taken
        self.taken = 0  # how often it was (tests count them)

    def offer(self, series: Series) -> bool:
        """One snapshot's history; True when it is taken (due, or for another GPU than held)."""
        self._since += 1
        if self._since < self.every and self._keys(series) == self._keys(self._held):
            return False
        self._held, self._since = dict(series), 0
        self.taken += 1
        return True

    def due(self, index: int) -> bool:
        """Whether the next snapshot's offer would take a history of GPU `index`: the only polls
        that need to fetch one (a remote hub's series are round trips of every kept sample)."""
        return self._since + 1 >= self.every or {index} != self._keys(self._held)

    def series(self, index: int, name: str) -> list[float | None]:
        return self._held.get((index, name), [])

    @staticmethod
    def _keys(series: Series) -> set[Hashable]:
        return {index for index, _ in series}
