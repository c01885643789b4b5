"""TextPanel (tui/text_panel.py) and HeldHistory (tui/held_history.py) under Textual's Pilot:
a changed panel repaints only its changed columns without a relayout; the history is renewed
every few snapshots, and at once for another GPU."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from textual._compositor import ChopsUpdate
from textual.app import App, ComposeResult
from textual.geometry import Region

from gpumix.tui.held_history import HeldHistory
from gpumix.tui.text_panel import TextPanel, changed_regions, changed_spans
from tests.screen import screen_text


class PanelApp(App[None]):
    CSS = "TextPanel { padding: 0 1; }"

    def compose(self) -> ComposeResult:
        yield TextPanel("host · CUDA 12.8 · 12:00:01\nCPU 10%", id="panel")


def count_layouts(app: App[Any]) -> list[int]:
    """One entry per layout pass of the screen (Screen._refresh_layout)."""
    calls: list[int] = []
    screen = app.screen
    original = screen._refresh_layout

    def refresh_layout(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        original(*args, **kwargs)

    screen._refresh_layout = refresh_layout
    return calls


def record_refreshes(widget: Any) -> list[tuple[tuple[Region, ...], dict[str, Any]]]:
    calls: list[tuple[tuple[Region, ...], dict[str, Any]]] = []
    original = widget.refresh

    def refresh(*regions: Region, **kwargs: Any) -> Any:
        calls.append((regions, kwargs))
        return original(*regions, **kwargs)

    widget.refresh = refresh
    return calls


def record_writes(app: App[Any]) -> list[str]:
    """What the driver would write for each partial update (App._display renders it so)."""
    writes: list[str] = []
    original = app._display

    def display(screen: Any, renderable: Any) -> None:
        if isinstance(renderable, ChopsUpdate):
            console = Console(file=io.StringIO(), force_terminal=True, color_system="256", width=app.size.width)
            writes.append(renderable.render_segments(console))
        original(screen, renderable)

    app._display = display
    return writes


def test_changed_span_and_regions() -> None:
    assert changed_spans("12:00:01", "12:00:02") == [(7, 8)]
    assert changed_spans("abc", "abc") == []
    assert changed_spans("abcd", "ab") == [(2, 4)]  # the old tail is blanked
    assert changed_spans("1 ........................ 2", "3 ........................ 4") == [(0, 1), (27, 28)]
    assert changed_spans("1 .. 2", "3 .. 4") == [(0, 6)]  # close together: one
    assert changed_regions(["a", "b"], ["a"], 10) is None  # one line fewer: a relayout
    assert changed_regions(["a"], ["x" * 11], 10) is None  # it would wrap
    assert changed_regions(["a", "bcd"], ["a", "bXd"], 10) == [Region(1, 1, 1, 1)]
    assert changed_regions(["漢字"], ["漢x"], 10) == [Region(0, 0, 10, 1)]  # wide characters: the line


async def test_a_clock_tick_repaints_its_digit_without_a_relayout() -> None:
    app = PanelApp()
    async with app.run_test(size=(40, 6)) as pilot:
        panel = app.query_one(TextPanel)
        await pilot.pause()
        layouts, refreshes = count_layouts(app), record_refreshes(panel)
        panel.show("host · CUDA 12.8 · 12:00:02\nCPU 10%")
        await pilot.pause()
        assert refreshes == [((Region(26, 0, 1, 1),), {})] and layouts == []
        assert "12:00:02" in screen_text(app) and panel.relayouts == 0
        panel.show("host · CUDA 12.8 · 12:00:02\nCPU 10%")  # the same text: nothing
        assert len(refreshes) == 1


async def test_only_the_changed_columns_are_written_to_the_terminal() -> None:
    app = PanelApp()
    async with app.run_test(size=(40, 6)) as pilot:
        panel = app.query_one(TextPanel)
        await pilot.pause()
        writes = record_writes(app)
        panel.show("host · CUDA 12.8 · 12:00:09\nCPU 10%")
        await pilot.pause()
        text = "".join(writes)
        assert "9" in text and "host" not in text and "12:00" not in text, text  # Textual wrote from the line's start


async def test_a_new_line_count_lays_out_again() -> None:
    app = PanelApp()
    async with app.run_test(size=(40, 6)) as pilot:
        panel = app.query_one(TextPanel)
        await pilot.pause()
        panel.show("one\ntwo\nthree")
        await pilot.pause()
        assert panel.relayouts == 1 and panel.size.height == 3
        assert "three" in screen_text(app)


async def test_text_is_never_markup() -> None:
    app = PanelApp()
    async with app.run_test(size=(40, 6)) as pilot:
        panel = app.query_one(TextPanel)
        panel.update("[bold]job[/bold] [/data/a.bin]")
        await pilot.pause()
        assert "[bold]job[/bold] [/data/a.bin]" in screen_text(app)


def test_history_is_renewed_every_few_snapshots_and_for_another_gpu() -> None:
    held = HeldHistory(every=3)
    assert held.offer({(0, "power_w"): [1.0]})  # the first
    assert not held.offer({(0, "power_w"): [1.0, 2.0]})
    assert not held.offer({(0, "power_w"): [1.0, 2.0, 3.0]})
    assert held.series(0, "power_w") == [1.0]
    assert held.offer({(0, "power_w"): [1.0, 2.0, 3.0, 4.0]})  # the third since
    assert held.series(0, "power_w") == [1.0, 2.0, 3.0, 4.0]
    assert held.offer({(5, "power_w"): [9.0]})  # another GPU selected: at once
    assert held.series(5, "power_w") == [9.0] and held.series(0, "power_w") == []
