"""The keyed-table sync (tui/keyed_table.py) and the three tables on it, under Textual's Pilot:
rows added, removed and updated by id; an unchanged sync repaints nothing; a changed cell is
re-rendered and repainted alone; outside text is shown as text."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.coordinate import Coordinate
from textual.geometry import Region

from gpumix.hub import Hub
from gpumix.tui.app import GpumixApp
from gpumix.tui.gpu_table import GpuTable
from gpumix.tui.keyed_table import MAX_ROWS, KeyedTable
from gpumix.tui.ranks_screen import RanksScreen
from gpumix.tui.screens import ProcessesScreen
from tests.screen import screen_text, started
from tests.tui_world import job_hub

pytestmark = pytest.mark.usefixtures("tui_env")
COLUMNS = ("name", "value")


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield KeyedTable(id="table")

    def on_mount(self) -> None:
        for key in COLUMNS:
            self.query_one(KeyedTable).add_column(key.title(), key=key)


def rows(**values: str) -> dict[str, dict[str, str]]:
    return {key: {"name": key, "value": value} for key, value in values.items()}


def record_refreshes(widget: Any) -> list[tuple[Region, ...]]:
    """Every refresh the widget is asked for, with its regions (none: the whole widget)."""
    calls: list[tuple[Region, ...]] = []
    original = widget.refresh

    def refresh(*regions: Region, **kwargs: Any) -> Any:
        calls.append(regions)
        return original(*regions, **kwargs)

    widget.refresh = refresh
    return calls


def line_text(table: KeyedTable, key: str) -> str:
    return table.render_line(table.get_row_index(key) + table.header_height).text


async def test_sync_adds_removes_and_updates_rows() -> None:
    app = TableApp()
    async with app.run_test(size=(60, 12)) as pilot:
        table = app.query_one(KeyedTable)
        assert table.sync(rows(a="1", b="2", c="3")) == (3, 0, 0)
        assert table.sync(rows(a="1", c="30", d="4")) == (1, 1, 1)  # d added, b gone, c's value
        await pilot.pause()
        assert [row.value for row in table.rows] == ["a", "c", "d"]
        assert [table.get_cell(key, "value").plain for key in ("a", "c", "d")] == ["1", "30", "4"]
        assert "30" in line_text(table, "c") and "Value" in screen_text(app)
        assert table.sync({}) == (0, 3, 0) and table.row_count == 0


async def test_an_unchanged_sync_repaints_nothing() -> None:
    app = TableApp()
    async with app.run_test(size=(60, 12)) as pilot:
        table = app.query_one(KeyedTable)
        table.sync(rows(a="1", b="2"))
        await pilot.pause()
        calls = record_refreshes(table)
        assert table.sync(rows(a="1", b="2")) == (0, 0, 0)
        assert calls == []


async def test_a_changed_cell_is_rendered_and_repainted_alone() -> None:
    app = TableApp()
    async with app.run_test(size=(60, 12)) as pilot:
        table = app.query_one(KeyedTable)
        table.sync(rows(a="1", b="2", c="3"))
        await pilot.pause()
        for key in ("a", "b", "c"):
            line_text(table, key)  # every cell rendered and cached
        cache = table._cell_render_cache
        cached, update_count = {key: cache.get(key) for key in cache.keys()}, table._update_count
        calls = record_refreshes(table)
        table.sync(rows(a="1", b="22", c="3"))
        assert calls == [(table._get_cell_region(Coordinate(1, 1)),)]
        assert table._update_count == update_count  # DataTable.update_cell bumps it: every cache stale
        assert "22" in line_text(table, "b") and "3" in line_text(table, "c")
        rendered = [key for key in cache.keys() if cache.get(key) is not cached.get(key)]  # rendered anew
        assert {(key[0].value, key[1].value) for key in rendered} == {("b", "value")}


async def test_a_wider_value_widens_its_auto_sized_column() -> None:
    app = TableApp()
    async with app.run_test(size=(60, 12)) as pilot:
        table = app.query_one(KeyedTable)
        table.sync(rows(a="9"))
        table.sync(rows(a="123456"))
        await pilot.pause()
        assert "123456" in line_text(table, "a")


async def test_cells_are_text_never_markup_and_rows_are_bounded() -> None:
    app = TableApp()
    async with app.run_test(size=(60, 12)) as pilot:
        table = app.query_one(KeyedTable)
        hostile = {"x": {"name": "[/data/a.bin]", "value": "[bold red]boom[/]"}}
        table.sync(hostile)
        table.sync({"x": {"name": "[/data/a.bin]", "value": "[link=x]y"}})
        await pilot.pause()
        assert "[/data/a.bin]" in line_text(table, "x") and "[link=x]y" in line_text(table, "x")
        table.sync({str(i): {"name": str(i)} for i in range(MAX_ROWS + 5)})
        assert table.row_count == MAX_ROWS


def with_util(snapshot: dict[str, Any], index: int, util: float) -> dict[str, Any]:
    changed = copy.deepcopy(snapshot)
    changed["gpus"][index]["util_gpu_pct"] = util
    return changed


async def test_gpu_table_repaints_only_the_changed_cell(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        await pilot.pause()
        table = app.query_one(GpuTable)
        snapshot = app.snapshot
        palette = app._palette
        calls = record_refreshes(table)
        table.show(snapshot["gpus"], palette, snapshot.get("ranks"))
        assert calls == []  # the same snapshot again: nothing to paint
        table.show(with_util(snapshot, 2, 7.0)["gpus"], palette, snapshot.get("ranks"))
        column = table.get_column_index("util")
        assert calls == [(table._get_cell_region(Coordinate(2, column)),)]
        uuid = snapshot["gpus"][2]["uuid"]
        assert "  7%" in line_text(table, uuid)


async def test_processes_screen_repaints_one_cell_and_shows_names_as_text(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=(100, 30)) as pilot:
        await started(pilot, app)
        screen = ProcessesScreen()
        await app.push_screen(screen)
        await pilot.pause()
        snapshot = copy.deepcopy(app.snapshot)
        process = {"pid": 4242, "user": "[b]root[/b]", "name": "x", "command": "python [/data/a.bin] --lr 1e-3",
                   "gpu_mem_bytes": 2**30, "cpu_pct": 10.0, "rss_bytes": 2**30}
        snapshot["gpus"][0]["processes"] = [process]
        screen.show(snapshot)
        await pilot.pause()
        text = screen_text(app)
        assert "python [/data/a.bin] --lr 1e-3" in text and "[b]root[/b]" in text
        table = screen.query_one(KeyedTable)
        calls = record_refreshes(table)
        process["cpu_pct"] = 55.0
        screen.show(snapshot)
        assert len(calls) == 1 and calls[0], calls  # one region (the CPU% cell), never the whole table
        await pilot.pause()
        assert "55%" in screen_text(app)
        snapshot["gpus"][0]["processes"] = []
        screen.show(snapshot)
        await pilot.pause()
        assert "[/data/a.bin]" not in screen_text(app)


async def test_ranks_screen_updates_in_place() -> None:
    hub = job_hub()
    app = GpumixApp(hub, interval_s=60)
    async with app.run_test(size=(120, 30)) as pilot:
        await started(pilot, app)
        screen = RanksScreen()
        await app.push_screen(screen)
        await pilot.pause()
        table = screen.query_one(KeyedTable)
        assert table.row_count == 10
        snapshot = copy.deepcopy(app.snapshot)
        calls = record_refreshes(table)
        screen.show(snapshot)
        assert calls == []
        snapshot["ranks"][3]["cpu_pct"] = 12.0
        screen.show(snapshot)
        assert len(calls) == 1 and calls[0]
        snapshot["ranks"] = snapshot["ranks"][:4]
        screen.show(snapshot)
        assert table.row_count == 4
