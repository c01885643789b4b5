"""One keyed-table sync for the GPU, processes and ranks tables: rows by id, columns by name.

`KeyedTable.sync(rows)` adds the rows that are new, removes the rows that are gone and rewrites only
the cells whose text or style changed, and a rewritten cell is repainted alone. DataTable's own
`update_cell` repaints the whole table and bumps the one counter every render cache is keyed by, so a
tick that changed one number re-rendered every visible cell (most of the dashboard's CPU, issue 13)
and the header went out again. Cells are rich Text, never markup: process and job names come from
outside.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import accumulate
from typing import Any, NamedTuple

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.coordinate import Coordinate
from textual.geometry import Region
from textual.widgets import DataTable

from gpumix.tui import partial_render, terminal_writes
from gpumix.tui.cell_render import TableFlags, plain_cell, table_flags

MAX_ROWS = 4096  # the hub keeps at most 4096 ranks; a table never holds more rows than that

CellValue = Text | str
Signature = tuple[str, str, tuple[Any, ...]]


class SyncResult(NamedTuple):
    added: int
    removed: int
    cells_rewritten: int


def as_text(value: CellValue) -> Text:
    """A cell as Text: a str is taken literally ("[/data/a.bin]" is a file name, not markup)."""
    return value if isinstance(value, Text) else Text(value)


def signature(text: Text) -> Signature:
    """What a cell looks like: its text, style and styled spans."""
    return text.plain, str(text.style), tuple(text.spans)


class KeyedTable(DataTable):
    """A DataTable kept in step with `{row id: {column key: cell}}` by `sync`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._shown: dict[str, dict[str, Signature]] = {}  # row id -> column key -> what is on screen
        self._pending: list[tuple[str, str, Text]] = []  # cells rewritten, repainted together
        self._batching = False

    def on_mount(self) -> None:
        terminal_writes.install()  # partial updates start at the changed cell
        partial_render.install()  # and render only the changed rows

    _pass_rich_style: Style | None = None  # the widget's style while one render pass runs

    def render_lines(self, crop: Any) -> Any:
        """DataTable's, with the widget's Rich style worked out once for the pass: DataTable.render_line
        asks for it per line, and each time it walks the styles of every ancestor (a tenth of the
        10-GPU dashboard's work per snapshot, its rows all changed). Styles do not change mid-pass."""
        self._pass_rich_style = None
        self._pass_rich_style = self.rich_style
        try:
            return super().render_lines(crop)
        finally:
            self._pass_rich_style = None

    @property
    def rich_style(self) -> Style:
        return self._pass_rich_style if self._pass_rich_style is not None else super().rich_style

    def _render_cell(self, row_index: int, column_index: int, base_style: Style, width: int,
                     cursor: bool = False, hover: bool = False) -> Any:
        """A cell of plain text drawn by hand (gpumix.tui.cell_render), cached as DataTable caches
        its own; the header and any other cell as DataTable renders them."""
        if row_index >= 0 and column_index >= 0:
            lines = self._plain_cell(self._row_locations.get_key(row_index), self._column_locations.get_key(column_index),
                                     row_index, column_index, base_style, width, cursor, hover, table_flags(self))
            if lines is not None:
                return lines
        return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)

    def _plain_cell(self, row_key: Any, column_key: Any, row_index: int, column_index: int, base_style: Style,
                    width: int, cursor: bool, hover: bool, flags: TableFlags) -> Any:
        """The cell's cached lines, or drawn by hand and cached (DataTable's cache and key); None when
        it is not a plain cell."""
        key = (row_key, column_key, base_style, cursor, hover, flags.show_hover_cursor, self._update_count,
               self._pseudo_class_state)
        lines = self._cell_render_cache.get(key)
        if lines is None:
            lines = plain_cell(self, row_index, column_index, base_style, width, cursor, hover, flags, row_key, column_key)
            if lines is not None:
                self._cell_render_cache[key] = lines
        return lines

    def _render_line_in_row(self, row_key: Any, line_no: int, base_style: Style, cursor_location: Coordinate,
                            hover_location: Coordinate) -> Any:
        """DataTable's, for a data row of a table whose cursor is on rows, with no row labels and no
        fixed columns (the GPU table): the same cache and the same (fixed, scrollable) lines, with the
        columns' widths, the table's reactives and the highlights worked out once for the row, not
        per cell, and no header style made for nothing (a busy GPU's row changes every snapshot:
        DataTable's own took a sixth of the dashboard's calls for it, issue 13). Others: DataTable's."""
        if self.cursor_type != "row" or self.fixed_columns or (self._labelled_row_exists and self.show_row_labels) \
                or row_key not in self._row_locations:
            return super()._render_line_in_row(row_key, line_no, base_style, cursor_location, hover_location)
        flags = table_flags(self)
        cache_key = (row_key, line_no, base_style, cursor_location, hover_location, "row", flags.show_cursor,
                     flags.show_hover_cursor, self._update_count, self._pseudo_class_state)
        cached = self._row_render_cache.get(cache_key)
        if cached is not None:
            return cached
        row_index = self._row_locations.get(row_key)
        row_style = self._get_row_style(row_index, base_style)
        cursor, hover = cursor_location.row == row_index, hover_location.row == row_index  # _should_highlight, "row"
        columns = self.ordered_columns
        widths = self._render_widths(columns)
        scrollable_row = []
        for column_index, (column, width) in enumerate(zip(columns, widths, strict=True)):
            lines = self._plain_cell(row_key, column.key, row_index, column_index, row_style, width, cursor, hover, flags)
            if lines is None:
                lines = super()._render_cell(row_index, column_index, row_style, width, cursor, hover)
            scrollable_row.append(lines[line_no])
        remaining_space = max(0, self.size.width - (sum(widths) + self._row_label_column_width))
        extend_style, _ = self._get_styles_to_render_cell(False, False, False, hover, cursor, flags.show_cursor,
                                                          flags.show_hover_cursor, False, False)
        extend_style = row_style + extend_style + Style.from_meta({"row": row_index, "column": 0, "out_of_bounds": True})
        scrollable_row.append([Segment(" " * remaining_space, extend_style)])
        row_pair: tuple[list[Any], list[Any]] = ([], scrollable_row)
        self._row_render_cache[cache_key] = row_pair
        return row_pair

    def sync(self, rows: Mapping[str, Mapping[str, CellValue]]) -> SyncResult:
        """Make the table show `rows` (at most MAX_ROWS, in their order for new rows); a missing
        cell is empty. Unchanged cells are not touched, so an unchanged tick repaints nothing."""
        columns = [column.key.value for column in self.ordered_columns]
        wanted = dict(list(rows.items())[:MAX_ROWS])
        gone = [row.value for row in list(self.rows) if row.value not in wanted]
        for key in gone:
            self.remove_row(key)
            self._shown.pop(key, None)
        added, changed = 0, 0
        self._batching = True
        try:
            for key, cells in wanted.items():
                texts = {column: as_text(cells.get(column, "")) for column in columns}
                if key not in self.rows:
                    self.add_row(*texts.values(), key=key)
                    self._shown[key] = {column: signature(text) for column, text in texts.items()}
                    added += 1
                    continue
                shown = self._shown.get(key, {})
                for column, text in texts.items():
                    if shown.get(column) != signature(text):
                        self.update_cell(key, column, text)
                        changed += 1
        finally:
            self._batching = False
            self._flush()
        return SyncResult(added, len(gone), changed)

    def update_cell(self, row_key: Any, column_key: Any, value: Any, *, update_width: bool = False) -> None:
        """One cell: repainted alone, after the rest of a sync's changes (and remembered, so a
        sync agrees with what is on screen)."""
        if update_width:
            super().update_cell(row_key, column_key, value, update_width=True)
            return
        key = getattr(row_key, "value", row_key)
        column = getattr(column_key, "value", column_key)
        text = as_text(value)
        self._shown.setdefault(key, {})[column] = signature(text)
        self._pending.append((key, column, text))
        if not self._batching:
            self._flush()

    def _flush(self) -> None:
        changed, self._pending = self._pending, []
        if changed:
            self._rewrite(changed)

    def _rewrite(self, changed: list[tuple[str, str, Text]]) -> None:
        """Put the changed cells in, drop only their cached renders, repaint only their regions;
        a cell wider than its auto-sized column goes through DataTable's own update (the widths)."""
        repaint = []
        for key, column, text in changed:
            width = self.columns[column].content_width if column in self.columns else 0
            if self.columns[column].auto_width and cell_len(text.plain) > width:
                super().update_cell(key, column, text, update_width=True)  # a relayout, rarely
                continue
            self._data[key][column] = text
            repaint.append((key, column))
        if not repaint:
            return
        cells = set(repaint)
        rows = {key for key, _ in repaint}
        indexes = {self.get_row_index(key) for key in rows}
        # DataTable's caches keyed (row, column, ...), (row, line, ...) and (count, row index); the
        # keys' plain values compared, not the keys: a RowKey hashes in Python, a str in C (the
        # scans were a tenth of a 10-GPU table's sync)
        # (DataTable's keys are RowKey and ColumnKey: their value read as an attribute, not by a call each)
        self._discard(self._cell_render_cache, [k for k in self._cell_render_cache.keys()
                                                if (k[0].value, k[1].value) in cells])
        self._discard(self._row_render_cache, [k for k in self._row_render_cache.keys() if k[0].value in rows])
        self._discard(self._row_renderable_cache, [k for k in self._row_renderable_cache.keys() if k[1] in indexes])
        self._line_cache.clear()  # lines are joined from the row cache: cheap to rebuild
        # one refresh for them all: each refresh_coordinate cleared the widget's style caches and
        # prompted the message pump again (a tenth of the 10-GPU dashboard's work, issue 13)
        window, scroll = self.window_region, self.scroll_offset
        visible = [region.translate(-scroll) for region in self._cell_regions(repaint)
                   if region and window.overlaps(region)]
        if visible:
            self.refresh(*visible)

    def _render_widths(self, columns: list[Any]) -> list[int]:
        """Column.get_render_width of each column, the padding read once (it is a reactive: each
        read is several calls)."""
        padding = 2 * self.cell_padding
        return [padding + (column.content_width if column.auto_width else column.width) for column in columns]

    def _cell_regions(self, cells: list[tuple[str, str]]) -> list[Region]:
        """DataTable._get_cell_region of each (row key, column key), the columns' and rows' offsets
        summed once: it summed the widths of every column and the heights of every row before the
        cell, for each cell (most of a busy GPU's table sync, issue 13)."""
        columns = self.ordered_columns
        widths = self._render_widths(columns)
        lefts = list(accumulate(widths, initial=self._row_label_column_width))
        rows = self.ordered_rows
        tops = list(accumulate((row.height for row in rows), initial=self.header_height if self.show_header else 0))
        regions = []
        for key, column in cells:
            row_index, column_index = self.get_row_index(key), self.get_column_index(column)
            regions.append(Region(lefts[column_index], tops[row_index], widths[column_index], rows[row_index].height))
        return regions

    @staticmethod
    def _discard(cache: Any, stale: list[Any]) -> None:
        for cache_key in stale:
            cache.discard(cache_key)

    def forget_cells(self) -> None:
        """Every cell is rewritten at the next sync (after a theme change: the styles differ)."""
        for shown in self._shown.values():
            shown.clear()

    def clear(self, columns: bool = False) -> Any:
        self._shown.clear()
        return super().clear(columns=columns)
