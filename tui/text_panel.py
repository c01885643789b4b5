"""A panel of plain text that repaints only what changed (issue 13: the dashboard's bytes).

`Static.update` lays the whole screen out again and repaints the whole panel, so a clock that moved
one digit rewrote the title line and a changed number rewrote every line of the detail panel. A
`TextPanel` keeps its lines; while their count stays and every line fits the panel's width (nothing
wraps), it repaints on each changed line only the columns that changed (runs of changes close
together as one), with no relayout. Otherwise (a line more or less, a line that wraps) it updates as a
Static does. Its text is always plain Text, never markup: it holds outside text.

Such a repaint also renders only the changed lines: Textual renders a widget's whole text again for
any dirty region (the 35-line detail panel at 160x48 for a digit of the clock's neighbour), the
largest part of the dashboard's own work per snapshot (issue 13's profile).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import rich.cells
from rich.cells import cell_len, get_character_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import RenderResult
from textual.geometry import Region
from textual.strip import Strip
from textual.visual import Visual, visualize
from textual.widgets import Static

from gpumix.tui import partial_render, terminal_writes

# Whether every character of a line takes one cell (its cell_len is its len): Rich's own test, as
# cell_len makes it; without it (another Rich), cell_len.
_single_cells: Callable[[str], bool] = getattr(rich.cells, "_is_single_cell_widths", lambda text: False)

_SINGLE_CELLS: frozenset[str] = getattr(rich.cells, "_SINGLE_CELLS", frozenset())


def cell_width(text: str) -> int:
    """cell_len(text). A line whose numbers change every snapshot misses Rich's cache, and Rich then
    measures every character in a generator (a busy detail panel's line with an en dash: a hundred
    calls); here only the characters it does not know to be one cell wide are measured, one call
    each in C. Joiners and variation selectors, which Rich measures as graphemes: cell_len itself."""
    if _single_cells(text):
        return len(text)
    if "\u200d" in text or "\ufe0f" in text or not _SINGLE_CELLS:
        return cell_len(text)
    others = [char for char in text if char not in _SINGLE_CELLS]
    return len(text) - len(others) + sum(map(get_character_cell_size, others))


MERGE_GAP = 12  # unchanged columns between two changes that cost less to rewrite than to skip
# (a cursor move and the style opened again take about as many bytes)


def changed_spans(old: str, new: str, merge_gap: int = MERGE_GAP) -> list[tuple[int, int]]:
    """The column ranges [start, end) that differ between two lines of single-width characters
    (the shorter one padded with blanks); changes fewer than `merge_gap` columns apart are one."""
    width = max(len(old), len(new))
    old, new = old.ljust(width), new.ljust(width)
    spans: list[tuple[int, int]] = []
    for column in [x for x in range(width) if old[x] != new[x]]:  # a list: a generator resumed per change
        if spans and column - spans[-1][1] < merge_gap:
            spans[-1] = (spans[-1][0], column + 1)
        else:
            spans.append((column, column + 1))
    return spans


def changed_regions(old: list[str], new: list[str], width: int, old_fit: bool = False) -> list[Region] | None:
    """The regions to repaint when `old` lines become `new` in a panel `width` cells wide, or None
    when only a relayout will do (the line count changed, or a line wraps). `old_fit`: every old
    line is known to fit this width, so only the changed lines are measured (the detail panel's
    forty lines were measured twice a snapshot)."""
    if len(old) != len(new) or (not old_fit and any(cell_len(line) > width for line in old)):
        return None
    regions = []
    for y, (before, after) in enumerate(zip(old, new, strict=True)):
        if before == after:
            continue
        if _single_cells(after) and _single_cells(before):  # one C call each; cell_len took three
            after_cells, narrow = len(after), True
        else:
            after_cells = cell_width(after)
            narrow = cell_width(before) == len(before) and after_cells == len(after)
        if after_cells > width:
            return None
        if not narrow:  # wide characters
            regions.append(Region(0, y, width, 1))
            continue
        regions += [Region(start, y, end - start, 1) for start, end in changed_spans(before, after)]
    return regions


class TextPanel(Static):
    """A Static that shows plain text with `show(text)`, repainting only the changed columns."""

    def __init__(self, text: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._text = Text(text)
        self._lines: list[str] | None = text.split("\n") if text else None
        self.relayouts = 0  # how often a new text needed a layout pass (tests count them)
        self._stale_lines: set[int] = set()  # lines to render again alone, if only they are dirty
        self._line_regions: set[Region] = set()  # their dirty regions, as the widget keeps them
        self.lines_rendered = 0  # lines rendered alone, not with the whole text (tests count them)
        self._fit_width: int | None = None  # a width every line shown is known to fit (None: unknown)

    def render(self) -> RenderResult:
        return self._text

    @property
    def text(self) -> str:
        return self._text.plain

    def show(self, text: str) -> None:
        """Show `text` (a no-op when it is what is shown)."""
        lines = text.split("\n")
        old, self._lines = self._lines, lines
        if old == lines:
            return
        self._text = Text(text)
        width = self.content_size.width
        regions = changed_regions(old, lines, width, old_fit=self._fit_width == width) \
            if old is not None and self.is_mounted else None
        self._fit_width = width if regions is not None else None  # every line shown fits this width
        if regions is None and old is not None and self.is_mounted and self._same_height(old, lines):
            self.refresh()  # a line that wraps changed, the panel's height did not: no relayout
        elif regions is None:
            self.relayouts += 1
            self.refresh(layout=True)
        elif regions:
            self._stale_lines.update(region.y for region in regions)
            offset = self.content_offset  # the gutter's styles, looked up once, not per region
            self._line_regions.update([region.translate(offset) for region in regions])
            self.refresh(*regions)

    def _same_height(self, old: list[str], new: list[str]) -> bool:
        """Whether the new lines, wrapped as Textual wraps them, take the rows the old ones took
        (80 columns wrap the run line: a new step time there laid the whole screen out again)."""
        width = self.content_size.width
        if len(old) != len(new) or not width:
            return False
        heights = [visualize(self, Text("\n".join(lines)), markup=False).get_height(self.styles, width)
                   for lines in (old, new)]
        return heights[0] == heights[1]

    def _render_content(self) -> None:
        """Render again only the lines whose text changed, when that is all that did; else all."""
        stale, regions = self._stale_lines, self._line_regions
        self._stale_lines, self._line_regions = set(), set()
        cache = self._render_cache
        # anything else dirty (a theme, a resize, a full refresh), a selection, another line count: all
        if not stale or not self._dirty_regions <= regions or cache.size != self.size \
                or self.text_selection is not None or len(cache.lines) < len(self._lines or []):
            super()._render_content()
            return
        # the panel's width, style and alignment once for the lines, not per line (a busy GPU's
        # detail panel changes on three or four lines a snapshot)
        width, visual_style = self.content_size.width, self.visual_style
        by_hand = self.styles.text_align in ("left", "start")
        for y in stale:
            cache.lines[y] = self._render_one_line(y, width, visual_style, by_hand)
            self.lines_rendered += 1
        self._dirty_regions.clear()

    def _render_one_line(self, y: int, content_width: int, visual_style: Any, aligned_left: bool) -> Strip:
        """Line `y` as the whole text's render has it (a line that fits: no wrapping to follow).
        Plain printable text, aligned left: one segment in the panel's style, with the offset text
        selection reads, as Textual's Content gives it (built by hand: Content's render was most of
        the panel's cost per snapshot, issue 13); anything else goes through Content."""
        text = (self._lines or [""])[y]
        if text and text.isprintable() and text[-1] != " " and aligned_left:
            width = cell_width(text)
            if width <= content_width:
                return Strip([Segment(text, visual_style.rich_style_with_offset(0, y))], width)
        line = visualize(self, Text(text), markup=False)
        strips = Visual.to_strips(self, line, self.size.width, 1, self.visual_style)
        return _at_row(strips[0], y) if strips else Strip.blank(self.size.width, self.visual_style.rich_style)

    def render_lines(self, crop: Region) -> list[Strip]:
        """Widget.render_lines (StylesCache.render_widget), with the content lines of a plain panel
        (padding at most: no border, outline, hatch or tint on them, opaque, no links) put together
        here as StylesCache.render_line puts them: the padding's blanks in the panel's background around
        the content line made to the content's width. Textual reads every style of the widget again for
        each line (about 160 calls; a busy GPU's detail panel changes on three to eight lines a
        snapshot, issue 13). Anything else, a border row included, is Textual's."""
        styles, cache = self.styles, self._styles_cache
        size = self.region.size
        gutter = styles.gutter
        if self.BLANK or size.width != cache._width or crop.y < gutter.top or crop.bottom > size.height - gutter.bottom \
                or any(edge for edge, _ in styles.outline) or any(edge for edge, _ in styles.border[1::2]) \
                or (styles.has_rule("hatch") and styles.hatch != "none") or styles.tint.a \
                or styles.text_opacity != 1.0 or self.opacity != 1.0 or (self.auto_links and self.hover_style._link_id):
            return super().render_lines(crop)
        base_background, background = self.background_colors
        inner = cache.get_inner_outer(base_background, background)[0].rich_style
        content_width = self.content_region.width
        padding = styles.padding
        left = [Segment(" " * padding.left, inner)] if padding.left else []
        right = [Segment(" " * padding.right, inner)] if padding.right else []
        width, filters, lines, dirty = size.width, self.get_line_filters(), cache._cache, cache._dirty_lines
        strips = []
        for y in crop.line_range:
            strip = lines.get(y)
            if strip is None or y in dirty:
                content = self.render_line(y - gutter.top).adjust_cell_length(content_width, inner)
                strip = lines[y] = Strip([*left, *content, *right], width)
            for line_filter in filters:
                strip = strip.apply_filter(line_filter, background)
            strips.append(strip)
        dirty.difference_update(crop.line_range)
        if crop.column_span != (0, width):
            strips = [strip.crop(*crop.column_span) for strip in strips]
        return strips

    def update(self, content: Any = "", *, layout: bool = True) -> None:
        """As `show`: a Text's plain text, a str taken literally (never markup)."""
        self.show(content.plain if isinstance(content, Text) else str(content))

    def on_mount(self) -> None:
        terminal_writes.install()  # partial updates start at the changed column
        partial_render.install()  # and render only the changed rows


def _at_row(strip: Strip, y: int) -> Strip:
    """A line rendered alone (row 0) with the row in its cells' offsets (text selection reads them)."""
    if y == 0:
        return strip
    segments = []
    for text, style, control in strip:
        if style is not None and style._meta and "offset" in style.meta:
            style = style + Style.from_meta({"offset": (style.meta["offset"][0], y)})
        segments.append(Segment(text, style, control))
    return Strip(segments, strip.cell_length)
