"""Render only the changed rows of the widgets under them (issue 13: the idle dashboard's CPU).

Textual 8's partial screen update (`Compositor.render_partial_update`) takes the box around every
changed region as its crop and renders, for each widget that box touches, all of that widget's
visible lines: a clock digit in the title and a number in the host line at the bottom made it
render every widget of the screen in full (the 41-line detail panel, the footer, the screen's
background), a third of the dashboard's work per snapshot. Most lines come from caches, but each
still went through the widget's style cache, the line filters and a cut into chops. `install()`
renders, for each changed row, only the widgets on that row whose columns meet a changed span, and
only those rows of them (with the few unchanged rows between two, from the widget's cache, in the
same pass; none where widgets in front filled the row already), front to back as Textual does; what is written is the same chops for the
same spans. Full updates (resize, a new screen) and the SVG export stay Textual's own. textual is
pinned below 9; `installed()` says whether it took.
"""

from __future__ import annotations

from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.strip import Strip

_textual_render_partial_update = Compositor.render_partial_update

Span = tuple[int, int, int]  # y, x1, x2 (x2 exclusive)
# Unchanged rows of a widget between two of its changed rows rendered with them, in one render pass:
# such a row comes from the widget's line cache (a few calls), a pass of its own costs a hundred-odd
# (the widget's colours, opacity and the theme looked up again: a busy GPU's detail panel changes
# on three or four rows apart, issue 13). Only the changed rows are written, as before.
MERGE_GAP_ROWS = 4


def render_partial_update(self: Compositor) -> ChopsUpdate | None:
    """Compositor.render_partial_update, rendering the changed rows only."""
    update_regions = self._dirty_regions.copy()
    self._dirty_regions.clear()
    if not update_regions:
        return None
    height = self.size.height
    spans = [span for span in self._regions_to_spans(update_regions) if 0 <= span[0] < height]
    if not spans:
        return None
    cuts = self.cuts
    by_row: dict[int, list[tuple[int, int]]] = {}
    for y, x1, x2 in spans:
        by_row.setdefault(y, []).append((x1, x2))
    chops: list[dict[int, Strip | None]] = [dict.fromkeys(cut_set[:-1]) if y in by_row else {}
                                            for y, cut_set in enumerate(cuts)]
    for widget, (region, clip) in self.visible_widgets.items():
        render_region = region.intersection(clip)
        if not render_region:
            continue
        first_cut, last_cut = render_region.column_span
        # its rows with a change in its columns and a chop there that no widget in front has filled (the
        # screen behind everything was rendered for every changed row, and none of it used)
        rows = [y for y in render_region.line_range
                if y in by_row and any(x1 < last_cut and x2 > first_cut for x1, x2 in by_row[y])
                and _open(chops[y], cuts[y], first_cut, last_cut, by_row[y])]
        wanted = set(rows)
        for first, last in _blocks(rows, MERGE_GAP_ROWS):
            crop = Region(render_region.x - region.x, first - region.y, render_region.width, last - first + 1)
            for y, strip in zip(range(first, last + 1), widget.render_lines(crop), strict=False):
                if y in wanted:  # a row between two: rendered with them, not used
                    _fill(chops[y], cuts[y], strip, render_region.x, first_cut, last_cut)
    chop_ends = [cut_set[1:] for cut_set in cuts]
    return ChopsUpdate(chops, spans, chop_ends)


def _blocks(rows: list[int], gap: int) -> list[tuple[int, int]]:
    """The rows (ascending) as blocks (first, last), a block taking in up to `gap` rows between two:
    [3, 4, 5, 9, 30] with a gap of 4 -> (3, 9), (30, 30)."""
    blocks: list[tuple[int, int]] = []
    for y in rows:
        if blocks and y - blocks[-1][1] <= gap + 1:
            blocks[-1] = (blocks[-1][0], y)
        else:
            blocks.append((y, y))
    return blocks


def _open(line: dict[int, Strip | None], line_cuts: list[int], first_cut: int, last_cut: int,
          row_spans: list[tuple[int, int]]) -> bool:
    """Whether `_fill` would fill a chop of this line that is written: one of the widget's, still empty,
    that a changed span meets as ChopsUpdate.render_segments reads them (a chop from x to end is
    skipped when x > x2 or end <= x1). Filling any other changes nothing written."""
    return bool([cut for cut, end in zip(line_cuts, line_cuts[1:], strict=False)
                 if first_cut <= cut < last_cut and line.get(cut, False) is None
                 for x1, x2 in row_spans if cut <= x2 and end > x1])


def _fill(line: dict[int, Strip | None], line_cuts: list[int], strip: Strip, render_x: int,
          first_cut: int, last_cut: int) -> None:
    """Cut one widget line into the screen line's chops; a chop already filled (by a widget in
    front) stays, as in Compositor._render_chops."""
    final_cuts = [cut for cut in line_cuts if last_cut >= cut >= first_cut]
    for cut, piece in zip(final_cuts, strip.divide([cut - render_x for cut in final_cuts[1:]]), strict=False):
        if line.get(cut) is None:
            line[cut] = piece


def install() -> None:
    Compositor.render_partial_update = render_partial_update  # type: ignore[method-assign]


def uninstall() -> None:
    Compositor.render_partial_update = _textual_render_partial_update  # type: ignore[method-assign]


def installed() -> bool:
    return Compositor.render_partial_update is render_partial_update
