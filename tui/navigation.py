"""The dashboard's views: help, topology, processes, a GPU's charts, the ranks, findings and tiers
screens, the table's two column sets and its cursor. A mixin of the App (gpumix.tui.app); the
controls that change something are gpumix.tui.controls."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

# each view's screen loads when first opened (issue 13: RSS; with the charts, dialogs and topology they use)
if TYPE_CHECKING:
    from gpumix.tui.snapshot_view import SnapshotView


class Navigation:
    """Needs from the App: table (the GpuTable), snapshot, push_screen, render_snapshot."""

    snapshot: dict[str, Any] | None

    @property
    def selected_uuid(self) -> str | None:
        return self.table.selected_uuid

    def action_help(self) -> None:
        from gpumix.tui.screens import HelpScreen

        self.push_screen(HelpScreen())

    def action_topology(self) -> None:
        from gpumix.tui.screens import TopologyScreen

        self._push_view(TopologyScreen())

    def action_processes(self) -> None:
        from gpumix.tui.screens import ProcessesScreen

        self._push_view(ProcessesScreen())

    def action_charts(self) -> None:
        uuid = self.selected_uuid
        screens = sys.modules.get("gpumix.tui.screens")  # not loaded: no charts screen is open
        if uuid is None or (screens is not None and isinstance(self.screen, screens.GpuChartsScreen)):
            return  # one charts screen at a time: Enter again must not stack another (the stress test: 60)
        from gpumix.tui.screens import GpuChartsScreen

        self.push_screen(GpuChartsScreen(uuid))  # it draws the latest snapshot once mounted

    def action_switch_view(self) -> None:
        self.table.switch_view()
        if self.snapshot is not None:
            self.render_snapshot(self.snapshot)

    def action_ranks(self) -> None:
        from gpumix.tui.ranks_screen import RanksScreen

        self._push_view(RanksScreen())

    def action_findings(self) -> None:
        from gpumix.tui.advice_screens import FindingsScreen

        self._push_view(FindingsScreen())

    def action_tiers(self) -> None:
        from gpumix.tui.advice_screens import TiersScreen

        self._push_view(TiersScreen())

    def _push_view(self, screen: SnapshotView) -> None:
        self.push_screen(screen)  # it draws the latest snapshot once mounted

    def action_cursor_down(self) -> None:
        self.table.action_cursor_down()

    def action_cursor_up(self) -> None:
        self.table.action_cursor_up()
