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
