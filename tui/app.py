"""The gpumix-top Textual app: a client that renders hub snapshots.

Polling follows dolphie's rule: fetch on a thread of its own (gpumix.tui.poller),
render on the UI thread, and arm the next fetch only after the last one was
rendered, so polls never pile up and the UI never waits on the hardware.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

# before Textual loads (issue 13: RSS): textual.types without five widgets the dashboard never shows, the
# command palette's screen and widgets loaded when ctrl+p first opens it; each installs itself on import
# (platformdirs, uuid, difflib and mimetypes on first call: tui/main.py, the interactive monitor only)
import gpumix.cli.lazy_textual_palette  # noqa: F401
import gpumix.cli.lazy_textual_types  # noqa: F401

# isort: split
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.driver import Driver
from textual.filter import Monochrome, NoColor
from textual.screen import ModalScreen, Screen
from textual.widget import Widget
from textual.widgets import DataTable, Footer

from gpumix.hub.history import HISTORY_FIELDS
from gpumix.tui import format as fmt
from gpumix.tui.controls import UserControls
from gpumix.tui.gpu_table import GpuTable
from gpumix.tui.held_history import HeldHistory
from gpumix.tui.key_display import PlainKeyDisplay
from gpumix.tui.navigation import Navigation
from gpumix.tui.palette import Palette
from gpumix.tui.panels import (
    DETAIL_TEXT_LINES,
    detail_text,
    host_text,
    run_line,
    title_line,
)
from gpumix.tui.poller import Poller
from gpumix.tui.size_notice import SizeWatch, TooSmallScreen
from gpumix.tui.snapshot_view import SnapshotView
from gpumix.tui.staleness import StaleWatch
from gpumix.tui.text_panel import TextPanel
from gpumix.tui.themes import DEFAULT_THEME, NO_COLOR_THEME, load_themes
from gpumix.wire.snapshot_types import Source

# What the app reads and asks: an in-process Hub, a HubClient of a running one, several hubs.
SnapshotSource = Source


class DetailPanel(TextPanel):
    """The selected GPU's detail: redrawn when its height changes, since the rows it is given
    decide how much it shows (the lines, then taller charts); a new snapshot repaints only the
    columns that changed."""

    def on_resize(self, event: events.Resize) -> None:
        show = getattr(self.app, "_show_detail", None)
        if show is not None:
            self.call_after_refresh(show)


class GpumixApp(UserControls, Navigation, StaleWatch, SizeWatch, PlainKeyDisplay, App[None]):
    """Composition, polling and rendering; the controls' actions and workflows come from
    UserControls (gpumix.tui.controls), the views' from Navigation (gpumix.tui.navigation), the lost
    hub's notice from StaleWatch (gpumix.tui.staleness), the too-small notice from SizeWatch."""

    TITLE = "gpumix-top"
    CSS_PATH = "app.tcss"
    BINDINGS = [
        Binding("q", "quit", "Quit", id="quit"),
        Binding("question_mark", "help", "Help", key_display="?", id="help"),
        Binding("t", "topology", "P2P/topo", show=False, id="topology"),
        Binding("p", "processes", "Procs", show=False, id="processes"),
        Binding("v", "switch_view", "View", id="switch_view"),
        Binding("r", "ranks", "Ranks", id="ranks"),
        Binding("f", "findings", "Advice", id="findings"),
        Binding("g", "tiers", "Tiers", show=False, id="tiers"),
        Binding("c", "power", "Cap", id="power"),
        Binding("b", "fit_budget", "Budget", id="fit_budget"),
        Binding("s", "replan", "Split", id="replan"),
        Binding("space", "mark", "Mark", show=False, id="mark"),
        Binding("T", "mark_tier", "Mark tier", show=False, id="mark_tier"),
        Binding("u", "clear_marks", "Unmark", id="clear_marks"),  # in the footer only while marks exist
        Binding("m", "probe", "Probe", show=False, id="probe"),  # gpumix probe, after a confirmation
        Binding("j", "cursor_down", "Down", show=False, id="down"),
        Binding("k", "cursor_up", "Up", show=False, id="up"),
    ]

    CONTROL_ACTIONS = {"power", "fit_budget", "mark", "mark_tier", "clear_marks", "replan", "probe"}
    # Toasts at the top right: at the bottom they covered the dialogs' buttons at 80x24.
    CSS = "ToastRack { dock: top; align: right top; margin-bottom: 0; margin-top: 1; }"

    def __init__(self, source: SnapshotSource, interval_s: float = 1.0, theme: str | None = None,
                 readonly: bool = False) -> None:
        super().__init__()
        if self.no_color:
            # Textual's Monochrome filter turns the terminal's default colours into black on black
            # in a truecolor terminal; NoColor leaves every cell in the terminal's own colours.
            self._filters = [NoColor() if isinstance(f, Monochrome) else f for f in self._filters]
        self.readonly = readonly  # a shared SSH session: every control hidden
        self.source = source
        for each in getattr(source, "sources", [source]):  # a dashboard: its hubs read busy GPUs' PCIe each tick
            if hasattr(each, "viewing"):
                each.viewing = True
        self.interval_s = interval_s
        self.snapshot: dict[str, Any] | None = None
        self.renders = 0
        self._requested_theme = theme
        self._palette: Palette | None = None
        self._series: dict[tuple[int, str], list[float | None]] = {}  # the selected GPU's history
        self._series_index: int | None = 0
        self._received_at_s = time.monotonic()  # when the last snapshot came (monotonic s)

    def get_driver_class(self) -> type[Driver]:
        """Textual's driver, except on a Linux terminal: there one whose input thread sleeps until a key
        comes (gpumix.tui.input_driver; Textual's wakes ten times a second)."""
        driver_class = super().get_driver_class()
        if (driver_class.__module__, driver_class.__name__) == ("textual.drivers.linux_driver", "LinuxDriver"):
            from gpumix.tui.input_driver import QuietInputDriver

            return QuietInputDriver
        return driver_class

    def compose(self) -> ComposeResult:
        # panels of plain text repainting only the columns that changed (the clock, a rate)
        widgets = (TextPanel(id="title"), GpuTable(id="gpus"), TextPanel(id="run"), DetailPanel(id="detail"),
                   TextPanel(id="host"))
        self._own = {f"#{widget.id}": widget for widget in widgets}
        yield from widgets
        yield Footer(compact=True)  # compact: Cap, Budget and Split stay in view at 80 columns

    _own: dict[str, Widget] = {}

    def _dashboard_widget(self, selector: str) -> Widget | None:
        """One of the dashboard's own widgets ("#title", "#gpus", ...), held since compose: a DOM
        query per panel per snapshot was a sixth of the idle dashboard's work (issue 13). None once
        it has left the dashboard's screen (the app is closing)."""
        widget = self._own.get(selector)
        return widget if widget is not None and self.screen_stack and widget.parent is self.main_screen else None

    def on_mount(self) -> None:
        loaded = load_themes()
        for theme in loaded.themes:
            self.register_theme(theme)
        for error in loaded.errors:
            self.say(f"theme skipped: {error}", severity="warning", timeout=8)
        wanted = self._requested_theme or (NO_COLOR_THEME if os.environ.get("NO_COLOR") is not None or self.no_color else DEFAULT_THEME)
        if wanted not in self.available_themes:
            self.say(f"unknown theme '{fmt.plain(wanted)}', using {DEFAULT_THEME}", severity="warning")
            wanted = DEFAULT_THEME
        self.theme = wanted
        self.theme_changed_signal.subscribe(self, self._theme_changed)
        self._palette = Palette.from_theme(self.current_theme)
        self.table.focus()
        self.fetch()
        self._arm_stale_check(self.stale_after_s)
        self._check_size()

    # -- size: below 80x24 one notice instead of clipped controls -------------------------

    def on_resize(self, event: events.Resize) -> None:
        # App.size follows a moment later (Textual applies it on a timer): the event's size is the new one
        self._terminal_size = event.size
        self._check_size()
        if self._dashboard_widget("#gpus"):
            self.table.fit_width(self.terminal_size.width)
            self._refresh_now()


    async def on_event(self, event: events.Event) -> None:
        # A key or mouse event still queued when the app has closed its screens (typed as it quits)
        # would make App.on_event read self.screen and raise ScreenStackError (the stress test).
        if isinstance(event, events.InputEvent) and not self.screen_stack:
            return
        await super().on_event(event)

    def say(self, message: Any, severity: Any = "information", timeout: float = 8) -> None:
        """A notification whose text may come from outside (a hub's reply, a file name): shown
        as plain text, never as markup."""
        self.notify(fmt.plain(message, max_chars=1000), severity=severity, timeout=timeout, markup=False)

    def _theme_changed(self, theme: Any) -> None:
        self._palette = Palette.from_theme(self.current_theme)
        self.table.forget_styles()
        if self.snapshot is not None:
            self.render_snapshot(self.snapshot)

    # -- polling ---------------------------------------------------------------

    _poller: Poller | None = None

    def fetch(self) -> None:
        """Poll the source now (gpumix.tui.poller: on its own thread; the first call starts it)."""
        if self._poller is None:
            self._poller = Poller(self._poll, self._deliver, self._poll_failed, asyncio.get_running_loop(),
                                  lambda: self.interval_s)
            self._poller.start()
        else:
            self._poller.now()

    def _poll(self) -> tuple[dict[str, Any] | None, dict[tuple[int, str], list]]:
        """On the poll thread: the snapshot, and the selected GPU's history with it when it is
        drawn (a remote hub's series is a round trip, which must not happen on the UI thread)."""
        snapshot = self.source.snapshot()
        index = self._series_index
        series = {(index, name): self.source.series(index, name) for name in HISTORY_FIELDS} if index is not None else {}
        return snapshot, series

    def _deliver(self, polled: tuple[dict[str, Any] | None, dict[tuple[int, str], list]]) -> None:
        """On the UI loop, in the app's context (as call_from_thread ran it); an error ends the app
        with its traceback, as a poll worker's did."""
        with self._context():
            try:
                self._received(*polled)
            except Exception as error:  # noqa: BLE001 - Textual's own handler shows it and exits
                self._handle_exception(error)

    def _poll_failed(self, error: Exception) -> None:
        with self._context():
            try:
                raise error  # Textual's handler prints the exception being handled: its traceback
            except Exception as raised:  # noqa: BLE001
                self._handle_exception(raised)

    def on_unmount(self) -> None:
        if self._poller is not None:
            self._poller.stop()
        self._cancel_stale_check()

    def cached_series(self, index: int, name: str) -> list[float | None]:
        return self._series.get((index, name), [])

    def _received(self, snapshot: dict[str, Any] | None, series: dict[tuple[int, str], list] | None = None) -> None:
        if series:
            self._series = series
        try:
            if snapshot is not None:
                self._snapshot_came(snapshot)
            if snapshot is not None and snapshot is not self.snapshot:
                self.snapshot = snapshot
                self.render_snapshot(snapshot)
        finally:
            if self._poller is not None:
                self._poller.rendered()  # the next poll an interval from now

    @property
    def main_screen(self) -> Screen[Any]:
        """The dashboard's own screen, at the bottom of the stack whatever is open above it."""
        return self.screen_stack[0]

    @property
    def table(self) -> GpuTable:
        table = self._dashboard_widget("#gpus")
        return table if isinstance(table, GpuTable) else self.main_screen.query_one(GpuTable)

    def render_snapshot(self, snapshot: dict[str, Any]) -> None:
        """The one path from a snapshot to the screen: the top screen and, behind dialogs, the
        screens they cover (down to the first full screen), each only while it can be drawn."""
        for screen in reversed(self.screen_stack):
            if screen is self.main_screen:
                # composed with the app, so drawable before its Mount; never while the app closes
                if not (screen._closing or screen._closed or screen._pruning) and self._dashboard_widget("#gpus"):
                    self._show_dashboard(snapshot)
            elif isinstance(screen, SnapshotView):
                screen.receive(snapshot)
            if not isinstance(screen, ModalScreen):
                break  # a full screen hides everything below it
        self._series_index = self._series_wanted(snapshot)

    def _series_wanted(self, snapshot: dict[str, Any]) -> int | None:
        """The GPU whose history the next poll fetches: the selected one, on the dashboard only
        when the held history is due (a remote hub's series are round trips of every kept sample);
        on any other screen (the charts) every time."""
        table = self._dashboard_widget("#gpus")
        uuid = table.selected_uuid if isinstance(table, GpuTable) else None
        gpu = next((g for g in snapshot["gpus"] if g["uuid"] == uuid), None)
        if gpu is None:
            return self._series_index
        if self.screen is self.main_screen and not self.held_history.due(gpu["index"]):
            return None
        return gpu["index"]

    def _show_dashboard(self, snapshot: dict[str, Any]) -> None:
        self.held_history.offer(self._series)  # sparklines and charts advance every few snapshots
        with self.batch_update():
            self.table.show(snapshot["gpus"], self._palette or Palette.from_theme(self.current_theme), snapshot.get("ranks"))
            self._set_text("#run", run_line(snapshot))
            self._set_text("#title", title_line(snapshot))
            self._show_detail()
            self._set_text("#host", host_text(snapshot, self.terminal_size.width - 2))
        self.renders += 1

    def _set_text(self, selector: str, text: str) -> None:
        """Repaint a panel only where its text changed (gpumix.tui.text_panel); plain text, never markup."""
        panel = self._dashboard_widget(selector)
        if isinstance(panel, TextPanel):  # None: the app is closing, its dashboard's widgets are gone (a late snapshot or recovery)
            panel.show(text)

    _held_history: HeldHistory | None = None

    @property
    def held_history(self) -> HeldHistory:
        """The history the detail panel draws (gpumix.tui.held_history)."""
        if self._held_history is None:
            self._held_history = HeldHistory()
        return self._held_history

    def _show_detail(self) -> None:
        if self.snapshot is None:
            return
        uuid = self.table.selected_uuid
        gpu = next((g for g in self.snapshot["gpus"] if g["uuid"] == uuid), None)
        if gpu is not None:
            self._series_index = gpu["index"]
            detail = self._dashboard_widget("#detail")
            if detail is None:
                return
            rows = detail.content_size.height or DETAIL_TEXT_LINES
            self._set_text("#detail", detail_text(gpu, self.held_history.series, self.terminal_size.width - 2, rows))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_detail()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_charts()

    # -- which actions apply (the controls are hidden with --readonly) ----------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if self.readonly and action in self.CONTROL_ACTIONS:
            return False
        if not self.screen_stack:
            return True
        if isinstance(self.screen, TooSmallScreen) and action != "quit":
            return False  # nothing opens behind or above the notice
        if action == "clear_marks" and not any(table.marked for table in self.main_screen.query(GpuTable)):
            return False  # the footer shows u only while there is something to clear
        return True

    def _refresh_now(self) -> None:
        if self.snapshot is not None:
            self.render_snapshot(self.snapshot)
