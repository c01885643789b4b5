"""A table cell of plain text drawn by hand (issue 13: the 10-GPU dashboard's CPU).

DataTable renders each cell it has not cached through Rich's console (Styled, Padding, Text,
render_lines): a third of the attached 10-GPU dashboard's work per snapshot, for about fifty
changed cells of a few characters. A cell that is one line of printable text exactly as wide as its
column, with no spans and no padding, is one segment whose style is what that pipeline gives it:
the row's style, the cell's place (for clicks), the cursor's or hover's component style, the
text's own style, then the post style. Anything else goes the DataTable way.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

SegmentLines = list[list[Segment]]
_NULL_STYLE = Style()  # a cell's own style when it has none: adds nothing, made once


class TableFlags(NamedTuple):
    """What a cell's render reads from the table besides the cell: its reactives, read once for a
    line of cells (each read of a reactive is several Python calls; a busy row has fifteen cells)."""

    plain: bool  # no cell padding, fixed rows or fixed columns: cells may be drawn by hand
    show_cursor: bool
    show_hover_cursor: bool
    css_foreground: bool  # cursor_foreground_priority == "css"
    css_background: bool


def table_flags(table: Any) -> TableFlags:
    return TableFlags(not (table.cell_padding or table.fixed_rows or table.fixed_columns), table.show_cursor,
                      table._show_hover_cursor, table.cursor_foreground_priority == "css",
                      table.cursor_background_priority == "css")


def plain_cell(table: Any, row_index: int, column_index: int, base_style: Style, width: int,
               cursor: bool, hover: bool, flags: TableFlags | None = None, row_key: Any = None,
               column_key: Any = None) -> SegmentLines | None:
    """The cell's lines drawn by hand, or None when it is not such a cell (the caller renders it).
    `flags`, `row_key` and `column_key`: the table's and the cell's, when the caller has them."""
    flags = flags or table_flags(table)
    if row_index < 0 or column_index < 0 or not flags.plain:
        return None
    row_key = row_key if row_key is not None else table._row_locations.get_key(row_index)
    column_key = column_key if column_key is not None else table._column_locations.get_key(column_index)
    row = table.rows.get(row_key)
    cell = table._data.get(row_key, {}).get(column_key)
    if row is None or row.height != 1 or not isinstance(cell, Text) or cell.spans:
        return None
    text = cell.plain
    if not text.isprintable() or cell_len(text) != width or cell.end != "\n":
        return None
    component_style, post_style = table._get_styles_to_render_cell(
        False, False, False, hover, cursor, flags.show_cursor, flags.show_hover_cursor,
        flags.css_foreground, flags.css_background)
    pre_style = base_style + Style.from_meta({"row": row_index, "column": column_index}) + component_style
    own = cell.style if isinstance(cell.style, Style) else Style.parse(cell.style) if cell.style else _NULL_STYLE
    return [[Segment(text, pre_style + own + post_style)]]
