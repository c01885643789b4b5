"""The dashboard's partial writes set a style only where it changes (issue 13: half of the idle
bytes were SGR sequences opened and reset around every one-digit chop) and show the same cells as
Textual's own writes: checked on a small interpreter of cursor moves and SGR sequences."""

from __future__ import annotations

import re

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from textual._compositor import ChopsUpdate
from textual.strip import Strip

from gpumix.tui import terminal_writes

SEQUENCE = re.compile(r"\x1b\[([0-9;]*)([A-Za-z])|(\n)|(.)", re.DOTALL)
DIM = Style(color="grey82", bgcolor="black")
HEAD = Style(bold=True, color="black", bgcolor="steel_blue1")
LINK = Style(color="blue", link="https://example.org")


def screen_of(written: str) -> dict[tuple[int, int], tuple[str, str]]:
    """(x, y) -> (character, the SGR codes in force when it was written, since the last reset)."""
    cells: dict[tuple[int, int], tuple[str, str]] = {}
    x = y = 0
    codes: list[str] = []
    for params, final, newline, char in SEQUENCE.findall(written):
        if final == "H":
            row, column = (int(part) for part in params.split(";"))
            x, y = column - 1, row - 1
        elif final == "m":
            for code in params.split(";"):
                codes = [] if code in ("", "0") else [*codes, code]
        elif newline:
            x, y = 0, y + 1
        elif char:
            cells[(x, y)] = (char, ";".join(codes))
            x += 1
    return cells


def update() -> ChopsUpdate:
    """Three lines: a title and a number in one style, a header, a plain run, a link."""
    lines = [
        Strip([Segment("gpumix · 12:00:09", DIM)]),
        Strip([Segment(" 100%", HEAD), Segment(" 71 W", DIM), Segment(" plain", None)]),
        Strip([Segment("  99", DIM), Segment("docs", LINK), Segment(" 3", DIM)]),
    ]
    chops = [{0: strip} for strip in lines]
    spans = [(y, 0, strip.cell_length) for y, strip in enumerate(lines)]
    return ChopsUpdate(chops, spans, [[strip.cell_length] for strip in lines])


def console() -> Console:
    return Console(width=40, force_terminal=True, color_system="256")


def test_the_cells_are_textuals_and_the_bytes_fewer() -> None:
    ours = terminal_writes.render_segments(update(), console())
    textuals = terminal_writes._textual_render_segments(update(), console())
    assert screen_of(ours) == screen_of(textuals)
    assert len(ours) < len(textuals)


def test_a_style_is_opened_once_while_it_holds_and_reset_once_at_the_end() -> None:
    # two one-digit chops on two lines in one style (the clock and a reading at idle)
    two = ChopsUpdate([{0: Strip([Segment("12", DIM)])}, {5: Strip([Segment("34", DIM)])}],
                      [(0, 0, 2), (1, 5, 7)], [[2], [7]])
    written = terminal_writes.render_segments(two, console())
    dim = DIM._make_ansi_codes(console()._color_system)
    # the style is unknown before the update (0 first), then holds: no SGR between the move and "34"
    assert written == f"\x1b[1;1H\x1b[0;{dim}m12\x1b[2;6H34\x1b[0m"
    assert screen_of(written) == screen_of(terminal_writes._textual_render_segments(two, console()))
