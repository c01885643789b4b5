"""A partial screen update renders only the changed rows of the widgets under them
(gpumix.tui.partial_render, issue 13: the idle dashboard's CPU), and writes what Textual's own would."""

from __future__ import annotations

import collections
from typing import Any

import pytest
from rich.console import Console
from textual.geometry import Region
from textual.widget import Widget

from gpumix.hub import Hub
from gpumix.tui import partial_render, terminal_writes
from gpumix.tui.app import GpumixApp
from gpumix.tui.gpu_table import GpuTable
from gpumix.tui.text_panel import TextPanel
from tests.screen import started

pytestmark = pytest.mark.usefixtures("tui_env")


async def test_a_change_at_the_top_and_one_at_the_bottom_render_no_widget_between(
        demo_hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        await pilot.pause()
        rendered: collections.Counter[str] = collections.Counter()
        rows: list[int] = []
        original, panel_original = Widget.render_lines, TextPanel.render_lines  # a text panel has its own

        def counted(widget: Widget, crop: Region, _original: Any = original) -> list:
            if _original is original and isinstance(widget, TextPanel):
                return _original(widget, crop)  # a panel's own, falling back: counted there
            rendered[type(widget).__name__ + (f"#{widget.id}" if widget.id else "")] += 1
            rows.append(crop.height)
            return _original(widget, crop)

        monkeypatch.setattr(Widget, "render_lines", counted)
        monkeypatch.setattr(TextPanel, "render_lines",
                            lambda widget, crop: counted(widget, crop, _original=panel_original))
        # the start's own late renders first (on a loaded CI box the footer's bindings came after the
        # pauses above): settled once a pause renders nothing; a screen that never settles fails below
        for _ in range(40):
            rendered.clear()
            await pilot.pause(0.05)
            if not rendered:
                break
        rendered.clear()
        rows.clear()
        for panel in ("#title", "#host"):  # row 0, the bottom rows: their first character
            text = app.query_one(panel).text
            app._set_text(panel, ("X" if text[0] != "X" else "Y") + text[1:])
        await pilot.pause()
        await pilot.pause()
        # Textual rendered every widget in the box around both changes, each in full: the table,
        # the 10-GPU detail, the footer. Only the two panels and the screen behind them now.
        assert set(rendered) <= {"TextPanel#title", "TextPanel#host", "Screen#_default"}, rendered
        assert rendered["TextPanel#title"] >= 1 and rendered["TextPanel#host"] >= 1
        assert max(rows) <= 3  # a row or a run of rows, never a whole widget of the screen's height


async def test_the_rows_rendered_write_what_textuals_update_writes(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=(100, 30)) as pilot:
        await started(pilot, app)
        table = app.query_one(GpuTable)
        table.marked.add(demo_hub.snapshot()["gpus"][2]["uuid"])  # a styled cell among them
        app._set_text("#title", "名前 \x1b[31m [b]not markup[/b] " + app.query_one("#title").text)  # wide, escape, brackets
        app.render_snapshot(demo_hub.snapshot())
        await pilot.pause()
        compositor = app.screen._compositor
        dirty = {Region(0, 0, 100, 1), Region(5, 3, 12, 2), Region(40, 4, 30, 1), Region(0, 27, 100, 2),
                 Region(90, 10, 10, 15), Region(0, 29, 100, 1)}
        console = Console(width=100, height=30, force_terminal=True, color_system="truecolor")
        compositor._dirty_regions = set(dirty)
        ours = partial_render.render_partial_update(compositor)
        compositor._dirty_regions = set(dirty)
        theirs = partial_render._textual_render_partial_update(compositor)
        assert ours is not None and theirs is not None
        assert ours.spans == theirs.spans
        assert terminal_writes._textual_render_segments(ours, console) == \
            terminal_writes._textual_render_segments(theirs, console)
        assert terminal_writes.render_segments(ours, console) == terminal_writes.render_segments(theirs, console)
        compositor._dirty_regions = set()
        assert partial_render.render_partial_update(compositor) is None  # nothing dirty: nothing written
        assert partial_render.installed()
