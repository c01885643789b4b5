"""A table cell of plain text drawn by hand (issue 13: the 10-GPU dashboard's CPU).

DataTable renders each cell it has not cached through Rich's console (Styled, Padding, Text,
render_lines): a third of the attached 10-GPU dashboard's work per snapshot, for about fifty
changed cells of a few characters. A cell that is one line of printable text exactly as wide as its
column, with no spans and no padding, is one segment whose style is what that pipeline gives it:
the row's style, the cell's place (for clicks), the cursor's or hover's component style, the
text's own style, then the post style. Anything else goes the DataTable way.
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

SegmentLines = list[list[Segment]]


def plain_cell(table: Any, row_index: int, column_index: int, base_style: Style, width: int,
               cursor: bool, hover: bool) -> SegmentLines | None:
    """The cell's lines drawn by hand, or None when it is not such a cell (the caller renders it)."""
    if row_index < 0 or column_index < 0 or table.cell_padding or table.fixed_rows or table.fixed_columns:
        return None
    row_key = table._row_locations.get_key(row_index)
    column_key = table._column_locations.get_key(column_index)
    row = table.rows.get(row_key)
    cell = table._data.get(row_key, {}).get(column_key)
    if row is None or row.height != 1 or not isinstance(cell, Text) or cell.spans:
        return None
    text = cell.plain
    if not text.isprintable() or cell_len(text) != width or cell.end != "\n":
        return None
    component_style, post_style = table._get_styles_to_render_cell(
        False, False, False, hover, cursor, table.show_cursor, table._show_hover_cursor,
        table.cursor_foreground_priority == "css", table.cursor_background_priority == "css")
    pre_style = base_style + Style.from_meta({"row": row_index, "column": column_index}) + component_style
    own = cell.style if isinstance(cell.style, Style) else Style.parse(cell.style) if cell.style else Style()
    return [[Segment(text, pre_style + own + post_style)]]
