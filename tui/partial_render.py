"""Render only the changed rows of the widgets under them (issue 13: the idle dashboard's CPU).

Textual 8's partial screen update (`Compositor.render_partial_update`) takes the box around every
changed region as its crop and renders, for each widget that box touches, all of that widget's
visible lines: a clock digit in the title and a number in the host line at the bottom made it
render every widget of the screen in full (the 41-line detail panel, the footer, the screen's
background), a third of the dashboard's work per snapshot. Most lines come from caches, but each
still went through the widget's style cache, the line filters and a cut into chops. `install()`
renders, for each changed row, only the widgets on that row whose columns meet a changed span, and
only those rows of them, front to back as Textual does; what is written is the same chops for the
same spans. Full updates (resize, a new screen) and the SVG export stay Textual's own. textual is
pinned below 9; `installed()` says whether it took.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import groupby

from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.strip import Strip

_textual_render_partial_update = Compositor.render_partial_update

Span = tuple[int, int, int]  # y, x1, x2 (x2 exclusive)


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
        rows = [y for y in render_region.line_range
                if y in by_row and any(x1 < last_cut and x2 > first_cut for x1, x2 in by_row[y])]
        for run in _runs(rows):
            y0 = run[0]
            crop = Region(render_region.x - region.x, y0 - region.y, render_region.width, len(run))
            for y, strip in zip(run, widget.render_lines(crop), strict=False):
                _fill(chops[y], cuts[y], strip, render_region.x, first_cut, last_cut)
    chop_ends = [cut_set[1:] for cut_set in cuts]
    return ChopsUpdate(chops, spans, chop_ends)


def _runs(rows: list[int]) -> Iterable[list[int]]:
    """Consecutive rows together: [3, 4, 5, 9] -> [3, 4, 5], [9]."""
    for _, group in groupby(enumerate(rows), key=lambda pair: pair[1] - pair[0]):
        yield [y for _, y in group]


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
