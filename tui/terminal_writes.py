"""Write only the changed columns to the terminal (issue 13: the dashboard's bytes).

Textual 8's partial screen update (`ChopsUpdate.render_segments`, what the driver writes) crops
each changed span at its end but not at its start: it writes from where the widget begins on that
line. A clock digit that changed rewrote the whole title up to the clock, and every changed cell
of a table row the row from its first column, once per changed cell. `install()` makes the update
start at the span too. Everything else stays Textual's: which lines and spans are dirty, full
repaints (resize, a new screen), the SVG export. Installed once by the widgets that rely on it
(TextPanel, KeyedTable); textual is pinned below 9, and `installed()` says whether it took.
"""

from __future__ import annotations

from rich.console import Console
from rich.control import Control
from textual._compositor import ChopsUpdate
from textual.strip import Strip

_textual_render_segments = ChopsUpdate.render_segments


def render_segments(self: ChopsUpdate, console: Console) -> str:
    """ChopsUpdate.render_segments, each chop cropped to [x1, x2) of its span."""
    sequences: list[str] = []
    last_y = self.spans[-1][0]
    for y, x1, x2 in self.spans:
        for end, (x, strip) in zip(self.chop_ends[y], self.chops[y].items(), strict=False):
            if strip is None or x >= x2 or end <= x1:
                continue
            start = max(x, x1)
            if start > x and strip.cell_length != len(strip.text):
                start = x  # a wide (or zero-width) character: cropping inside one would blank its half

            sequences.append(Control.move_to(start, y).segment.text)
            sequences.append(_cropped(strip, start - x, min(end, x2) - x).render(console))
        if y != last_y:
            sequences.append("\n")
    return "".join(sequences)


def _cropped(strip: Strip, start: int, end: int) -> Strip:
    return strip if start == 0 and end >= strip.cell_length else strip.crop(start, end)


def install() -> None:
    ChopsUpdate.render_segments = render_segments  # type: ignore[method-assign]


def uninstall() -> None:
    ChopsUpdate.render_segments = _textual_render_segments  # type: ignore[method-assign]


def installed() -> bool:
    return ChopsUpdate.render_segments is render_segments
