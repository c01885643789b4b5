"""What a busy snapshot no longer costs (issue 13, session 9: the dashboard's CPU with a busy GPU),
each cut checked against what Textual itself gives."""

from __future__ import annotations

import pytest
from textual.coordinate import Coordinate

from gpumix.tui.keyed_table import KeyedTable
from tests.test_keyed_table import TableApp, rows

pytestmark = pytest.mark.usefixtures("tui_env")


async def test_cell_regions_are_datatables_for_every_cell() -> None:
    app = TableApp()
    async with app.run_test(size=(60, 12)) as pilot:
        table = app.query_one(KeyedTable)
        table.sync(rows(**{f"r{n}": str(n) * (n % 4 + 1) for n in range(30)}))
        table.add_row("tall", "two\nlines", key="tall", height=2)  # a row of another height shifts those below
        table.sync({**rows(**{f"r{n}": str(n) * (n % 4 + 1) for n in range(30)}), "tall": {"name": "tall", "value": "x"}})
        table.add_row("after", "1", key="after")
        await pilot.pause()
        cells = [(row.value, column.value) for row in table.rows for column in table.columns]
        expected = [table._get_cell_region(Coordinate(table.get_row_index(key), table.get_column_index(column)))
                    for key, column in cells]
        assert table._cell_regions(cells) == expected
        table.show_header = False
        await pilot.pause()
        expected = [table._get_cell_region(Coordinate(table.get_row_index(key), table.get_column_index(column)))
                    for key, column in cells]
        assert table._cell_regions(cells) == expected


HISTORIES: list[object] = [
    [10.0, 55.5, None, 99.9, 100.0, 0.0, -0.0, 130.0],
    [1.0, True, 1, 0.5],  # True is no reading; 1 is one
    [float("nan"), 50.0, float("inf"), -float("inf"), 1e308, 1.7e308],
    [{"x": 1}, "50", [1.0], None, 20.0],  # unhashable and odd values from a hostile hub
    [],
    "not a list",
    [3.0] * 100,
]


@pytest.mark.parametrize("values", HISTORIES)
@pytest.mark.parametrize("top", [100, 100.0, None, 1.0, True, float("nan"), 0.0, 450.0])
def test_a_held_sparkline_is_what_spark_draws(values: object, top: object) -> None:
    from gpumix.tui import format as fmt

    for width in (4, 7, 40):
        assert fmt.held_spark(values, width, top) == fmt.spark(values, width, top)  # type: ignore[arg-type]
        assert fmt.held_spark(values, width, top) == fmt.spark(values, width, top)  # type: ignore[arg-type]  # cached


def test_a_held_sparkline_is_drawn_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpumix.tui import format as fmt

    fmt._spark_of.cache_clear()
    drawn: list[int] = []
    original = fmt.spark
    monkeypatch.setattr(fmt, "spark", lambda *a, **k: (drawn.append(1), original(*a, **k))[1])
    values = [float(n % 37) for n in range(300)]
    first = fmt.held_spark(values, 40, 100)
    assert fmt.held_spark(list(values), 40, 100.0) == first and len(drawn) == 1  # the next snapshot, held
    assert fmt.held_spark([*values, 99.0], 40, 100) != first and len(drawn) == 2  # a new sample: drawn
    assert fmt.held_spark([*values[:-1], True], 40, 100) == original([*values[:-1], True], 40, 100)


@pytest.mark.parametrize("values", [v for v in HISTORIES if isinstance(v, list)])
def test_a_chart_of_plain_floats_is_the_chart_of_their_numbers(values: list[object]) -> None:
    from gpumix.tui import format as fmt
    from gpumix.tui import panels

    for width, height, top in ((5, 3, 100.0), (80, 6, 130), (3, 1, True), (8, 2, None)):
        panels._chart_lines.cache_clear()
        expected = list(panels._chart_lines(tuple(fmt.number(v) for v in values[-width:]), width, height, fmt.number(top)))
        panels._chart_lines.cache_clear()
        assert panels.chart_block(values, width, height, top) == expected  # type: ignore[arg-type]


def test_a_held_true_or_int_is_never_taken_for_the_float_it_equals() -> None:
    from gpumix.tui import format as fmt
    from gpumix.tui import panels

    ones = [1.0, 1.0, 0.0, 1.0]
    for hostile in ([1.0, True, 0.0, 1.0], [1.0, 1, 0, 1.0]):
        assert fmt.held_spark(ones, 4, 1.0) == "██▁█"
        assert fmt.held_spark(hostile, 4, 1.0) == fmt.spark(hostile, 4, 1.0)  # type: ignore[arg-type]
        assert panels.chart_block(ones, 4, 1, 1.0) == ["██ █"]
        assert panels.chart_block(hostile, 4, 1, 1.0) == panels.chart_block(  # type: ignore[arg-type]
            [fmt.number(v) for v in hostile], 4, 1, 1.0)
    assert panels.chart_block([1.0, True, 0.0, 1.0], 4, 1, 1.0) == ["█  █"]  # True: a gap, not a one


async def test_a_row_line_is_the_line_datatable_assembles(demo_hub: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from textual.widgets import DataTable

    from gpumix.tui.app import GpumixApp
    from gpumix.tui.gpu_table import GpuTable
    from tests.screen import started

    app = GpumixApp(demo_hub, interval_s=60)  # type: ignore[arg-type]
    async with app.run_test(size=(130, 30)) as pilot:
        await started(pilot, app)
        table = app.query_one(GpuTable)
        table.marked.add(demo_hub.snapshot()["gpus"][1]["uuid"])  # type: ignore[attr-defined]  # a styled cell
        table.update_cell(table.ordered_rows[2].key, "tier", "名前 x")  # a wide character: DataTable's own render
        app.render_snapshot(demo_hub.snapshot())  # type: ignore[attr-defined]
        await pilot.pause()
        style = table.rich_style
        keys = [row.key for row in table.ordered_rows]
        checked = 0
        for zebra, fixed_rows, show_cursor in ((False, 0, True), (True, 0, True), (False, 2, True), (False, 0, False)):
            table.zebra_stripes, table.fixed_rows, table.show_cursor = zebra, fixed_rows, show_cursor
            for cursor_row, hover_row in ((0, 3), (2, 2), (5, 0)):
                cursor, hover = Coordinate(cursor_row, 0), Coordinate(hover_row, 4)
                for key in keys:
                    table._row_render_cache.clear()
                    table._cell_render_cache.clear()
                    mine = table._render_line_in_row(key, 0, style, cursor, hover)
                    table._row_render_cache.clear()
                    table._cell_render_cache.clear()
                    with monkeypatch.context() as patch:  # every cell through Rich, as DataTable renders it
                        patch.setattr(table, "_render_cell", lambda *a, **k: DataTable._render_cell(table, *a, **k))
                        theirs = DataTable._render_line_in_row(table, key, 0, style, cursor, hover)
                    assert mine == theirs, (key, zebra, fixed_rows, show_cursor, cursor_row, hover_row)
                    checked += 1
        assert checked == 4 * 3 * len(keys) and len(keys) >= 6


def test_changed_rows_close_together_are_one_block() -> None:
    from gpumix.tui.partial_render import _blocks

    assert _blocks([3, 4, 5, 9, 30], 4) == [(3, 9), (30, 30)]
    assert _blocks([3, 9], 4) == [(3, 3), (9, 9)]  # five rows between: two passes
    assert _blocks([0, 2, 4, 6], 1) == [(0, 6)] and _blocks([], 4) == []


async def test_a_panel_changed_on_rows_apart_renders_once_and_writes_what_textual_writes(
        demo_hub: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console
    from textual.geometry import Region
    from textual.widget import Widget

    from gpumix.tui import partial_render, terminal_writes
    from gpumix.tui.app import GpumixApp
    from tests.screen import started

    app = GpumixApp(demo_hub, interval_s=60)  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        await pilot.pause()
        detail = app.query_one("#detail")
        top = detail.region.y
        compositor = app.screen._compositor
        dirty = {Region(6, top + 1, 4, 1), Region(30, top + 3, 8, 1), Region(2, top + 5, 3, 1), Region(0, top + 14, 50, 1)}
        passes: list[int] = []
        original = Widget.render_lines
        monkeypatch.setattr(Widget, "render_lines",
                            lambda widget, crop: (passes.append(crop.height) if widget is detail else None,
                                                  original(widget, crop))[1])
        compositor._dirty_regions = set(dirty)
        ours = partial_render.render_partial_update(compositor)
        monkeypatch.undo()
        assert passes == [5, 1]  # rows 1-5 in one pass (3 written), row 14 alone
        compositor._dirty_regions = set(dirty)
        theirs = partial_render._textual_render_partial_update(compositor)
        assert ours is not None and theirs is not None and ours.spans == theirs.spans
        console = Console(width=120, height=40, force_terminal=True, color_system="truecolor")
        assert terminal_writes._textual_render_segments(ours, console) == \
            terminal_writes._textual_render_segments(theirs, console)


def _chart_lines_as_drawn_before(recent: tuple, width: int, rows: int, top: float | None) -> tuple[str, ...]:
    """The detail panel's chart as session 8 drew it (min/max per value, a cell at a time)."""
    from gpumix.tui.panels import CHART_LEVELS

    if not top or top <= 0:
        return ("",) * rows
    eighths = [None if v is None else round(min(1.0, max(0.0, v / top)) * rows * 8) for v in recent]
    out = []
    for row in range(rows - 1, -1, -1):
        chars = []
        for level in eighths:
            filled = 0 if level is None else level - row * 8
            chars.append(" " if filled <= 0 else CHART_LEVELS[min(filled, 8) - 1])
        out.append("".join(chars).rjust(width))
    return tuple(out)


def test_a_chart_is_drawn_as_before() -> None:
    import random

    from gpumix.tui import panels

    rng = random.Random(13)
    for _ in range(300):
        top = rng.choice([100.0, 450.0, 31.5e9, 1e-300, 1.7e308, 0.0, None])
        values = tuple(rng.choice([None, -5.0, -0.0, 0.0, (top or 1.0) * 2, rng.uniform(0, (top or 1.0) * 1.1),
                                   (top or 1.0) * rng.randint(0, 16) / 16]) for _ in range(rng.randint(0, 90)))
        width, rows = rng.randint(len(values), len(values) + 5), rng.randint(1, 9)
        assert panels._chart_lines.__wrapped__(values, width, rows, top) == \
            _chart_lines_as_drawn_before(values, width, rows, top), (values, width, rows, top)
