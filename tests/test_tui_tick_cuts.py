"""What the dashboard no longer makes per snapshot (issue 13, session 8: the idle CPU): no Textual timer
for the staleness watch (a Timer, a task and a signature inspection each), no Strip for each chop it
writes; what it shows and writes is the same."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from textual._compositor import ChopsUpdate
from textual.app import App
from textual.strip import Strip

from gpumix.hub import Hub
from gpumix.tui import terminal_writes
from gpumix.tui.app import GpumixApp
from gpumix.tui.text_panel import TextPanel

pytestmark = pytest.mark.usefixtures("tui_env")


async def until(predicate: Any, deadline_s: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while not predicate():
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.02)


class Copies:
    """A source whose every answer is a new snapshot (as a live hub's), until frozen."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.frozen = False

    def snapshot(self) -> dict[str, Any] | None:
        return None if self.frozen else dict(self.hub.snapshot())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.hub, name)


@pytest.mark.timeout(120)
async def test_the_staleness_watch_makes_no_textual_timer_per_snapshot(demo_hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    timers: list[str] = []
    original = App.set_timer
    monkeypatch.setattr(App, "set_timer", lambda self, delay, callback=None, **k: (
        timers.append(getattr(callback, "__name__", "?")), original(self, delay, callback, **k))[1])
    source = Copies(demo_hub)
    app = GpumixApp(source, interval_s=0.3)  # stale after 1 s
    async with app.run_test(size=(80, 24)):
        await until(lambda: app.renders >= 6)
        assert "_check_stale" not in timers  # the old watch: one Timer (and its task) per snapshot
        source.frozen = True
        await until(lambda: app.stale)  # still noticed
        assert "hub lost" in app.query_one("#title", TextPanel).text
        source.frozen = False
        await until(lambda: not app.stale)
    assert app._stale_handle is None  # the pending check dropped with the app


STRIPS = [
    Strip([Segment("gpumix · 12:00", Style(dim=True)), Segment(" 100%", Style(bold=True)), Segment(" x", None)]),
    Strip([Segment("名前", Style(color="red")), Segment("ab", None), Segment("", Style(bold=True)), Segment("çé", None)]),
    Strip([Segment("", Style(bold=True)), Segment("abc", Style(italic=True)), Segment("", Style(dim=True))]),
    Strip([]),
]


def test_a_chop_is_cropped_as_strip_crop_crops_it() -> None:
    for strip in STRIPS:
        for start in range(strip.cell_length + 2):
            for end in range(start, strip.cell_length + 3):
                assert list(terminal_writes._cropped(strip, start, end)) == list(strip.crop(start, end)), (strip, start, end)


def test_writing_chops_makes_no_strip(monkeypatch: pytest.MonkeyPatch) -> None:
    def update() -> ChopsUpdate:  # new strips each time (a Strip caches its crops)
        line = Strip([Segment("GPU 0 util  93%  power 201 W", Style(bold=True)), Segment(" rest", None)])
        return ChopsUpdate([{0: line}, {0: line}], [(0, 12, 15), (1, 3, 20)], [[line.cell_length], [line.cell_length]])

    console = Console(width=40, force_terminal=True, color_system="256")
    expected = terminal_writes.render_segments(update(), console)
    chops = update()
    made: list[int] = []
    original = Strip.__init__
    monkeypatch.setattr(Strip, "__init__", lambda self, *a, **k: (made.append(1), original(self, *a, **k))[1])
    assert terminal_writes.render_segments(chops, console) == expected
    assert made == []  # Strip.crop made one per chop cropped, with its seven caches
    assert expected == "\x1b[1;13H\x1b[0;1m93%\x1b[2;4H 0 util  93%  pow\x1b[0m"  # only the spans, cropped


class PanelApp(App[None]):
    CSS = "TextPanel { height: auto; }"

    def compose(self) -> Any:
        yield TextPanel("\n".join(f"line {y} · util {y}%" for y in range(30)), id="panel")


async def test_a_changed_line_is_the_only_one_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpumix.tui import text_panel
    from tests.test_tui_text_panel_lines import whole_render

    app = PanelApp()
    async with app.run_test(size=(40, 34)) as pilot:
        panel = app.query_one(TextPanel)
        await pilot.pause()
        lines = panel.text.split("\n")
        panel.show("\n".join(lines[:5] + ["line 5 · util 6%"] + lines[6:]))  # measures all once: the width was unknown
        await pilot.pause()
        measured: list[str] = []
        original = text_panel.cell_len
        monkeypatch.setattr(text_panel, "cell_len", lambda text: (measured.append(text), original(text))[1])
        panel.show("\n".join(lines[:5] + ["line 5 · util 7%"] + lines[6:]))
        assert set(measured) <= {"line 5 · util 6%", "line 5 · util 7%"}  # not the 29 lines that stayed (60 before)
        assert panel.relayouts == 0
        await pilot.pause()
        assert "util 7%" in panel._render_cache.lines[5].text
        monkeypatch.undo()
        panel.show("\n".join(lines[:5] + ["line 5 · util 8% " + "x" * 40] + lines[6:]))  # now it wraps: laid out again
        await pilot.pause()
        assert panel.relayouts == 1
        panel.show("\n".join(lines[:5] + ["line 5 · util 9%"] + lines[6:]))  # fits again
        await pilot.pause()
        panel.show("\n".join(lines[:5] + ["line 5 · util 8%"] + lines[6:]))  # a column: the width known again
        await pilot.pause()
        await pilot.resize_terminal(12, 34)  # narrower: the unchanged lines no longer fit
        await pilot.pause()
        panel.show("\n".join(lines[:5] + ["line 5"] + lines[6:]))  # fits 12 columns; the others do not
        assert not panel._stale_lines  # measured again at the new width: not a repaint of columns
        await pilot.pause()
        assert panel._render_cache.lines == whole_render(panel)  # the wrapped text, as Textual draws it


async def test_a_changed_cell_drops_its_renders_without_hashing_every_cached_key(
        demo_hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    from textual.widgets._data_table import StringKey

    from gpumix.tui.gpu_table import GpuTable
    from tests.screen import started

    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        await pilot.pause()
        table = app.query_one(GpuTable)
        uuid = demo_hub.snapshot()["gpus"][3]["uuid"]
        cached = len(table._cell_render_cache.keys())
        assert cached > 50  # every cell of the ten rows drawn
        hashed: list[int] = []
        original = StringKey.__hash__
        monkeypatch.setattr(StringKey, "__hash__", lambda self: (hashed.append(1), original(self))[1])
        table.update_cell(uuid, "temp", " 99C")
        monkeypatch.undo()
        assert len(hashed) < 80, len(hashed)  # 32 here; each cached render's key hashed, 308 before
        assert not [k for k in table._cell_render_cache.keys() if (k[0].value, k[1].value) == (uuid, "temp")]
        assert len(table._cell_render_cache.keys()) >= cached - 3  # only that cell's renders dropped
        await pilot.pause()
        row = table.get_row_index(uuid)
        assert "99C" in table.render_line(row + 1 - int(table.scroll_offset.y)).text  # the header is line 0


async def test_a_table_pass_works_out_its_style_once_not_per_line(demo_hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    from textual.dom import DOMNode

    from gpumix.tui.gpu_table import GpuTable
    from tests.screen import screen_text, started

    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        await pilot.pause()
        table = app.query_one(GpuTable)
        asked: list[int] = []
        passes: list[int] = []
        original_style = DOMNode.rich_style
        original_lines = GpuTable.render_lines
        monkeypatch.setattr(DOMNode, "rich_style", property(lambda self: (
            asked.append(1) if self is table else None, original_style.fget(self))[1]))
        monkeypatch.setattr(GpuTable, "render_lines", lambda self, crop: (passes.append(crop.height),
                                                                           original_lines(self, crop))[1])
        snapshot = demo_hub.snapshot()
        gpus = [{**gpu, "temperature_c": 40 + number} for number, gpu in enumerate(snapshot["gpus"])]
        app.render_snapshot({**snapshot, "gpus": gpus})  # a new number in each of the ten rows
        await pilot.pause()
        monkeypatch.undo()
        assert sum(passes) >= 10  # ten rows rendered again
        assert len(asked) <= len(passes)  # once a pass; DataTable asked once a line
        assert "  40C" in screen_text(app) and "  49C" in screen_text(app)
