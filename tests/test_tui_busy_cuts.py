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
        for show_header, padding in ((False, 1), (True, 0), (True, 3)):
            table.show_header, table.cell_padding = show_header, padding
            await pilot.pause()
            expected = [table._get_cell_region(Coordinate(table.get_row_index(key), table.get_column_index(column)))
                        for key, column in cells]
            assert table._cell_regions(cells) == expected, (show_header, padding)
            assert table._render_widths(table.ordered_columns) == [c.get_render_width(table) for c in table.ordered_columns]


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
        original = type(detail).render_lines  # the panel's own (Widget's when it falls back)
        monkeypatch.setattr(type(detail), "render_lines",
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


async def test_the_screen_behind_is_rendered_only_where_it_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console
    from textual.app import App, ComposeResult
    from textual.geometry import Region
    from textual.widget import Widget

    from gpumix.tui import partial_render, terminal_writes
    from gpumix.tui.text_panel import TextPanel

    class SideApp(App[None]):
        CSS = "Screen { background: $warning 20%; } #a { width: 30; height: 4; } #b { width: 40; height: 6; }"

        def compose(self) -> ComposeResult:
            yield TextPanel("\n".join(f"a line {n}" for n in range(4)), id="a")
            yield TextPanel("\n".join(f"b line {n} 名前" for n in range(6)), id="b")

    app = SideApp()
    async with app.run_test(size=(60, 12)) as pilot:
        await pilot.pause()
        compositor = app.screen._compositor
        # rows 1-2 on the first panel and past its right edge (the screen shows there), rows 5-6 on the
        # second panel only, row 11 below both (only the screen)
        dirty = {Region(2, 1, 40, 2), Region(0, 5, 20, 2), Region(5, 11, 30, 1)}
        screen_rows: list[int] = []
        original = Widget.render_lines
        monkeypatch.setattr(Widget, "render_lines",
                            lambda widget, crop: (screen_rows.extend(crop.line_range) if widget is app.screen else None,
                                                  original(widget, crop))[1])
        compositor._dirty_regions = set(dirty)
        ours = partial_render.render_partial_update(compositor)
        monkeypatch.undo()
        assert set(screen_rows) >= {1, 2, 11} and not set(screen_rows) & {5, 6}, screen_rows
        compositor._dirty_regions = set(dirty)
        theirs = partial_render._textual_render_partial_update(compositor)
        assert ours is not None and theirs is not None and ours.spans == theirs.spans
        console = Console(width=60, height=12, force_terminal=True, color_system="truecolor")
        assert terminal_writes._textual_render_segments(ours, console) == \
            terminal_writes._textual_render_segments(theirs, console)
        assert terminal_writes.render_segments(ours, console) == terminal_writes.render_segments(theirs, console)


def _spark_as_drawn_before(values: object, width: int, top: object = None, relative: bool = False) -> str:
    """fmt.spark as session 8 drew it (a number() and min/max per value)."""
    from gpumix.tui import format as fmt

    recent = [fmt.number(v) for v in (values if isinstance(values, list) else [])[-width:]]
    known = [v for v in recent if v is not None]
    bottom = min(known) if relative and known else 0.0
    top = fmt.number(top) or (max(known) if known else 0.0)
    half_scale = top / 2 - bottom / 2  # type: ignore[operator]
    chars = []
    for value in recent:
        if value is None or half_scale <= 0:
            chars.append(" " if value is None or not relative else fmt.SPARK[0])
        else:
            fraction = min(1.0, max(0.0, (value / 2 - bottom / 2) / half_scale))
            chars.append(fmt.SPARK[int(fraction * (len(fmt.SPARK) - 1) + 0.5)])
    return "".join(chars).rjust(width)


def test_a_sparkline_is_drawn_as_before() -> None:
    import random

    from gpumix.tui import format as fmt

    rng = random.Random(9)
    odd = [None, True, 1, "7", float("nan"), float("inf"), -float("inf"), 1.7e308, -1.7e308, 5e-324, -0.0, {"x": 1}]
    for _ in range(600):
        scale = rng.choice([1.0, 100.0, 31.5e9, 1e-300, 1.7e308])
        values = [rng.choice([rng.uniform(-0.2, 1.2) * scale, scale * rng.randint(0, 14) / 14, rng.choice(odd)])
                  if rng.random() < 0.5 else rng.uniform(0, scale) for _ in range(rng.randint(0, 60))]
        if rng.random() < 0.5:
            values = [v for v in values if isinstance(v, float) and v == v and abs(v) != float("inf")]  # the usual case
        top = rng.choice([None, scale, 0.0, True, float("nan"), scale / 3])
        width, relative = rng.randint(1, 70), rng.random() < 0.3
        assert fmt.spark(values, width, top, relative) == _spark_as_drawn_before(values, width, top, relative), \
            (values, width, top, relative)
    assert fmt.spark("not a list", 4) == _spark_as_drawn_before("not a list", 4) == "    "


def test_a_line_is_as_wide_as_rich_measures_it() -> None:
    import random

    import rich.cells
    from rich.cells import cell_len, get_character_cell_size

    from gpumix.tui.text_panel import cell_width

    assert rich.cells._SINGLE_CELLS and all(get_character_cell_size(c) == 1 for c in rich.cells._SINGLE_CELLS)
    rng = random.Random(5)
    alphabet = "abc 0123–·Σ▁█名前\x1b\x07\u200b\u0301\u00ad\ufe0f\u200d👍🏽é\u2028" + "".join(map(chr, range(0x2000, 0x2070)))
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert cell_width(text) == cell_len(text), repr(text)
    assert cell_width(" util ▁▂▃ 64%   power ▁▂ 301/450 W (100–450, def 450)") == 53  # the en dash: one cell


def test_a_chop_starts_with_the_cursor_move_rich_writes() -> None:
    from rich.console import Console
    from rich.control import Control
    from rich.segment import Segment
    from rich.style import Style
    from textual._compositor import ChopsUpdate
    from textual.strip import Strip

    from gpumix.tui.terminal_writes import render_segments

    console = Console(width=300, height=200, force_terminal=True, color_system="truecolor")
    for x, y in ((0, 0), (5, 3), (9, 9), (10, 10), (99, 48), (250, 150)):
        strip = Strip([Segment("ab", Style(bold=True))], 2)
        update = ChopsUpdate([{} for _ in range(y)] + [{x: strip}], [(y, x, x + 2)], [[] for _ in range(y)] + [[x + 2]])
        assert render_segments(update, console).startswith(Control.move_to(x, y).segment.text + "\x1b[")


async def test_a_panels_content_lines_are_what_textual_renders(demo_hub: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from textual._styles_cache import StylesCache
    from textual.geometry import Region
    from textual.widget import Widget

    from gpumix.tui.app import GpumixApp
    from gpumix.tui.text_panel import TextPanel
    from tests.screen import started

    app = GpumixApp(demo_hub, interval_s=60)  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        app._set_text("#title", "名前 \x1b[31m wide and escaped " + app.query_one("#title", TextPanel).text)
        await pilot.pause()
        through_textual: list[int] = []
        original = StylesCache.render_widget
        monkeypatch.setattr(StylesCache, "render_widget",
                            lambda cache, widget, crop: (through_textual.append(1), original(cache, widget, crop))[1])
        checked = fast = 0
        for theme, stale in (("gpumix-dark", False), ("gpumix-light", False), ("gpumix-16", False), ("gpumix-dark", True)):
            app.theme = theme
            app.set_class(stale, "-stale")
            await pilot.pause()
            for panel in app.query(TextPanel):
                width, height = panel.region.size
                top, bottom = panel.styles.gutter.top, height - panel.styles.gutter.bottom
                crops = [Region(0, top, width, bottom - top), Region(0, top, width, 1), Region(3, bottom - 1, width - 5, 1),
                         Region(0, 0, width, height)]
                for crop in crops:
                    if not crop.height or crop.bottom > height:
                        continue
                    panel._styles_cache.clear()
                    panel._styles_cache._width = width
                    through_textual.clear()
                    mine = panel.render_lines(crop)
                    fast += not through_textual
                    again = panel.render_lines(crop)  # from the panel's line cache
                    panel._styles_cache.clear()
                    theirs = Widget.render_lines(panel, crop)
                    assert mine == theirs == again, (theme, stale, panel.id, crop)
                    checked += 1
        assert checked >= 50 and fast >= 20, (checked, fast)
