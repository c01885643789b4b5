"""What the dashboard does per snapshot (issue 13, session 7: the idle CPU): no DOM query for its own
widgets, the polls on one thread of their own (no Textual worker, timer and future per poll) that
still wait for each render, and the detail panel's charts drawn once per history they show."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.dom import DOMNode
from textual.worker import Worker

from gpumix.hub import Hub
from gpumix.tui import panels
from gpumix.tui.app import GpumixApp
from gpumix.tui.keyed_table import KeyedTable
from gpumix.tui.poller import Poller
from gpumix.tui.text_panel import TextPanel
from tests.screen import started

pytestmark = pytest.mark.usefixtures("tui_env")


async def until(predicate: Any, deadline_s: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while not predicate():
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.02)


async def test_a_snapshot_reaches_the_dashboard_without_a_dom_query(demo_hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        title = app.query_one("#title", TextPanel)
        before = title.text
        queries: list[str] = []
        for name in ("query", "query_one", "query_exactly_one"):
            original = getattr(DOMNode, name)
            monkeypatch.setattr(DOMNode, name, lambda self, *a, _o=original, _n=name, **k: (queries.append(_n), _o(self, *a, **k))[1])
        snapshot = demo_hub.snapshot()
        app.render_snapshot({**snapshot, "timestamp_s": snapshot["timestamp_s"] + 60.0})  # the clock (minutes) moves
        app._check_stale()
        monkeypatch.undo()
        assert queries == []
        assert title.text != before  # drawn all the same


async def test_a_closing_dashboard_takes_no_late_snapshot(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        title = app.query_one("#title", TextPanel)
        await title.remove()
        assert app._dashboard_widget("#title") is None
        app._set_text("#title", "late")  # the widget has left the screen: nothing to draw into
        assert title.text != "late"


async def test_polls_come_from_one_thread_without_a_worker_each(demo_hardware, clock, monkeypatch: pytest.MonkeyPatch) -> None:
    workers: list[Worker] = []
    original = Worker.__init__
    monkeypatch.setattr(Worker, "__init__", lambda self, *a, **k: (workers.append(self), original(self, *a, **k))[1])
    hub = Hub(demo_hardware, interval_s=0.05, clock=clock)
    hub.tick()
    threads: set[str] = set()

    class Source:
        def snapshot(self) -> dict[str, Any]:
            threads.add(threading.current_thread().name)
            clock.advance(1)
            return hub.tick()

        def __getattr__(self, name: str) -> Any:
            return getattr(hub, name)

    app = GpumixApp(Source(), interval_s=0.05)
    async with app.run_test(size=(80, 24)):
        await until(lambda: app.renders >= 4)
    assert workers == []  # a Textual worker per poll made three messages, a task and a future each second
    assert threads == {"gpumix-poll"}
    assert app._poller is not None
    await until(lambda: not app._poller.alive, 10.0)  # stopped with the app


def test_the_next_poll_waits_for_the_render() -> None:
    loop = asyncio.new_event_loop()
    delivered: list[int] = []
    polls = iter(range(1000))
    poller = Poller(lambda: next(polls), delivered.append, lambda error: None, loop, lambda: 0.0)
    try:
        poller.start()
        loop.run_until_complete(asyncio.sleep(0.3))  # an interval of 0 s, never rendered: one poll only
        assert (poller.polls, delivered) == (1, [0])
        poller.now()
        loop.run_until_complete(asyncio.sleep(0.3))
        assert poller.polls == 1  # asked for, but not before the last one is rendered
        poller.rendered()
        for _ in range(100):
            loop.run_until_complete(asyncio.sleep(0.01))
            if delivered[1:]:
                break
        assert delivered[:2] == [0, 1]
    finally:
        poller.stop()
        loop.close()


def test_a_failed_fetch_is_handed_to_the_app_and_ends_the_polls() -> None:
    loop = asyncio.new_event_loop()
    failures: list[Exception] = []

    def broken() -> None:
        raise RuntimeError("the source broke")

    poller = Poller(broken, lambda result: None, failures.append, loop, lambda: 0.0)
    try:
        poller.start()
        for _ in range(200):
            loop.run_until_complete(asyncio.sleep(0.01))
            if failures and not poller.alive:
                break
        assert [str(error) for error in failures] == ["the source broke"] and not poller.alive
    finally:
        poller.stop()
        loop.close()


def test_charts_of_the_same_history_are_drawn_once() -> None:
    panels._chart_lines.cache_clear()
    values = [float(v % 100) for v in range(200)]
    first = panels.chart_block(values, 76, 5, 100.0)
    again = panels.chart_block(list(values), 76, 5, 100.0)  # the next snapshot, the history held
    assert first == again
    assert panels._chart_lines.cache_info().hits == 1
    assert panels.chart_block(values + [50.0], 76, 5, 100.0) != first  # a new sample: drawn anew


def test_a_cached_chart_keeps_true_a_gap_not_a_one() -> None:
    panels._chart_lines.cache_clear()
    ones = panels.chart_block([1.0, 1.0, 1.0], 3, 1, 1.0)
    hostile = panels.chart_block([True, True, True], 3, 1, 1.0)  # equal to 1 as a dict key, but no reading
    assert ones == ["███"] and hostile == ["   "]
    assert panels.chart_block([{"x": 1}, "nan", None], 3, 1, 1.0) == ["   "]  # unhashable: still a gap


class LinesApp(App[None]):
    CSS = "TextPanel { padding: 0 1; height: 8; border-top: solid $primary; color: $secondary; text-style: bold; }"

    def compose(self) -> ComposeResult:
        yield TextPanel("\n".join(LINES), id="panel")


LINES = ["GPU 0 · RTX 4090 · 12:00:01", " util ▁▂▃ 10%  power 71 W", " procs: 4242 名前 3% cpu", " held by: none"]


async def test_a_changed_plain_line_is_drawn_by_hand_as_content_would(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpumix.tui import text_panel
    from tests.test_tui_text_panel_lines import whole_render

    app = LinesApp()
    async with app.run_test(size=(50, 12)) as pilot:
        panel = app.query_one(TextPanel)
        await pilot.pause()
        through_content: list[str] = []
        original = text_panel.visualize
        monkeypatch.setattr(text_panel, "visualize", lambda widget, obj, **k: (through_content.append(str(obj)), original(widget, obj, **k))[1])
        panel.show("\n".join([LINES[0].replace(":01", ":02"), LINES[1].replace("71", "73"), LINES[2].replace("3%", "4%"),
                              " held by: \x1b[31m"]))  # an escape character: drawn as Content draws it
        await pilot.pause()
        assert panel.lines_rendered == 4
        assert through_content == [" held by: \x1b[31m"]  # the plain lines by hand (Content was most of their cost)
        monkeypatch.undo()
        assert panel._render_cache.lines == whole_render(panel)


async def test_table_cells_are_drawn_by_hand_as_datatable_draws_them(demo_hub: Hub, monkeypatch: pytest.MonkeyPatch) -> None:
    from textual.widgets import DataTable

    from gpumix.tui.gpu_table import GpuTable

    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        table = app.query_one(GpuTable)
        table.marked.add(demo_hub.snapshot()["gpus"][1]["uuid"])  # a styled cell ("*1" in the warning colour)
        app.render_snapshot(demo_hub.snapshot())
        await pilot.pause()
        through_rich: list[int] = []
        original = app.console.render_lines
        monkeypatch.setattr(app.console, "render_lines", lambda *a, **k: (through_rich.append(1), original(*a, **k))[1])
        for row in range(table.row_count):
            for column in range(len(table.columns)):
                for cursor, hover in ((False, False), (True, False), (False, True)):
                    width = table.ordered_columns[column].get_render_width(table)
                    mine = table._render_cell(row, column, table.rich_style, width, cursor, hover)
                    assert through_rich == []  # by hand: Rich's console was a third of the 10-GPU dashboard's work
                    table._cell_render_cache.clear()
                    theirs = DataTable._render_cell(table, row, column, table.rich_style, width, cursor, hover)
                    through_rich.clear()
                    assert mine == [list(line) for line in theirs], (row, column, cursor, hover)


async def test_the_cells_a_sync_changed_are_repainted_in_one_refresh() -> None:
    from textual.coordinate import Coordinate

    from tests.test_keyed_table import TableApp, record_refreshes, rows

    app = TableApp()
    async with app.run_test(size=(60, 12)) as pilot:
        table = app.query_one(KeyedTable)
        table.sync(rows(a="1", b="2", c="3"))
        await pilot.pause()
        calls = record_refreshes(table)
        table.sync(rows(a="10", b="2", c="30"))
        # each refresh cleared the widget's style caches and prompted the message pump again
        assert calls == [(table._get_cell_region(Coordinate(0, 1)), table._get_cell_region(Coordinate(2, 1)))]
