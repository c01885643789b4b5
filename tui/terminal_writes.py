"""Write only the changed columns to the terminal (issue 13: the dashboard's bytes).

Textual 8's partial screen update (`ChopsUpdate.render_segments`, what the driver writes) crops
each changed span at its end but not at its start: it writes from where the widget begins on that
line. A clock digit that changed rewrote the whole title up to the clock, and every changed cell
of a table row the row from its first column, once per changed cell. `install()` makes the update
start at the span too. Everything else stays Textual's: which lines and spans are dirty, full
repaints (resize, a new screen), the SVG export. Installed once by the widgets that rely on it
(TextPanel, KeyedTable); textual is pinned below 9, and `installed()` says whether it took.

Each chop also sets its colours only when they differ from what the terminal already has: Textual
opened and reset the style around every chop (23 of a 28-byte one-digit change at idle: half the
bytes were SGR), and ended each line with a newline no one needs (every chop starts with a cursor
move). A chop's text is the same; one reset ends the update.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.cells import cell_len
from rich.color import ColorSystem
from rich.console import Console
from rich.segment import Segment
from textual._compositor import ChopsUpdate
from textual.strip import Strip

RESET = "\x1b[0m"

_textual_render_segments = ChopsUpdate.render_segments


def render_segments(self: ChopsUpdate, console: Console) -> str:
    """ChopsUpdate.render_segments, each chop cropped to [x1, x2) of its span, its style set only
    where it changes."""
    sequences: list[str] = []
    state: list[str | None] = [None]  # the terminal's SGR now: None unknown, "" reset
    color_system = console._color_system or ColorSystem.TRUECOLOR
    for y, x1, x2 in self.spans:
        for end, (x, strip) in zip(self.chop_ends[y], self.chops[y].items(), strict=False):
            if strip is None or x >= x2 or end <= x1:
                continue
            start = max(x, x1)
            if start > x and strip.cell_length != len(strip.text):
                start = x  # a wide (or zero-width) character: cropping inside one would blank its half

            sequences.append(f"\x1b[{y + 1};{start + 1}H")  # Control.move_to(start, y)'s text, no Control made
            _render_strip(_cropped(strip, start - x, min(end, x2) - x), color_system, state, sequences)
    if state[0] != "":
        sequences.append(RESET)
    return "".join(sequences)


def _render_strip(segments: Iterable[Segment], color_system: ColorSystem, state: list[str | None], out: list[str]) -> None:
    """Strip.render's text, with an SGR only where the style differs from `state` (updated)."""
    for text, style, _ in segments:
        if style is not None and style._link:  # a hyperlink: Textual's own sequence, reset after it
            if state[0] != "":
                out.append(RESET)
            out.append(Strip.render_style(style, text, color_system))
            state[0] = ""
            continue
        ansi = "" if style is None else (style._ansi if style._ansi is not None else Strip.render_ansi(style, color_system))
        if ansi != state[0]:
            if not ansi:
                out.append(RESET)
            else:  # from reset (or from the unknown: 0 first) to this style in one sequence
                out.append(f"\x1b[{ansi}m" if state[0] == "" else f"\x1b[0;{ansi}m")
            state[0] = ansi
        out.append(text)


def _cropped(strip: Strip, start: int, end: int) -> Iterable[Segment]:
    """The segments of Strip.crop(start, end), without making a Strip of them (each new Strip builds
    seven caches: a few hundred objects a second on the idle dashboard, for one use)."""
    length = strip.cell_length
    end = min(length, end)
    if start <= 0 and end == length:
        return strip
    if end <= start or start >= length:
        return []
    out: list[Segment] = []
    pos = 0
    segments = iter(strip._segments)
    segment: Segment | None = None
    for segment in segments:
        end_pos = pos + cell_len(segment.text)
        if end_pos > start:
            segment = segment.split_cells(start - pos)[1]
            break
        pos = end_pos
    if end == length:  # to the end: the rest as it is (as Strip.crop)
        return [segment, *segments] if segment is not None else []
    pos = start
    while segment is not None:
        end_pos = pos + cell_len(segment.text)
        if end_pos < end:
            out.append(segment)
        else:
            out.append(segment.split_cells(end - pos)[0])
            break
        pos = end_pos
        segment = next(segments, None)
    return out


def install() -> None:
    ChopsUpdate.render_segments = render_segments  # type: ignore[method-assign]


def uninstall() -> None:
    ChopsUpdate.render_segments = _textual_render_segments  # type: ignore[method-assign]


def installed() -> bool:
    return ChopsUpdate.render_segments is render_segments
