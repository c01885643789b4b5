"""Short, fixed-width renderings of readings, and the one guard for text from outside.

Readings come from hubs, ranks and recordings: anything that is not a finite number (None, NaN,
inf, a string) prints as N/A, and a huge one in short scientific form, so no formatter raises.
Text from processes, ranks, rigs and recordings goes through `plain` before it is shown.
"""

from __future__ import annotations

import functools
import math
import unicodedata
from typing import Any

NA = "N/A"
GIB = 1024**3
MAX_TEXT_CHARS = 500  # a field from outside longer than this is cut (a screen line is ~80-200)
BIG = 1e9  # from here on a number prints as 1.7e+308, not as 309 digits
# Invisible characters that reorder the text around them (a filename that reads backwards).
_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _visible(char: str) -> str:
    """One character as the terminal may show it: controls as escapes (ESC as \\x1b)."""
    code = ord(char)
    if code < 0x20 or 0x7F <= code <= 0x9F:  # C0, DEL, C1: ESC, BEL, CSI start sequences
        return f"\\x{code:02x}"
    if char in _BIDI_CONTROLS or unicodedata.category(char) in ("Cs", "Zl", "Zp"):  # lone surrogates, line breaks
        return f"\\u{code:04x}"
    return char


def plain(value: Any, max_chars: int = MAX_TEXT_CHARS) -> str:
    """Text from outside as shown: one line, control characters made visible (\\x1b), cut to
    `max_chars`; None as N/A. Markup such as [/x] stays as typed: callers show the result as
    plain text (rich.text.Text or markup=False), never parse it."""
    if value is None:
        return NA
    try:
        text = value if isinstance(value, str) else str(value)
    except ValueError:  # an int too long to convert
        text = "?"
    if len(text) > max_chars:
        text = text[: max_chars - 1] + "…"
    if text.isprintable():  # the common case: nothing to escape
        return text
    return "".join(_visible(char) for char in text)


def number(value: Any) -> float | None:
    """A finite float, or None for anything else (None, NaN, ±inf, bools, strings)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        value = float(value)
    except OverflowError:  # an int beyond float range
        return None
    return value if math.isfinite(value) else None


def fixed(value: Any, digits: int = 0, scale: float = 1.0) -> str:
    """`value * scale` with `digits` decimals; N/A when not a finite number; 1.7e+308 when huge."""
    known = number(value)
    if known is None:
        return NA
    scaled = known * scale
    if not math.isfinite(scaled):
        return NA
    return f"{scaled:.2g}" if abs(scaled) >= BIG else f"{scaled:.{digits}f}"


def pct(value: float | None) -> str:
    shown = fixed(value)
    return shown if shown == NA else shown + "%"


def share(fraction: float | None) -> str:
    """A fraction (0.25) as a percentage (25%)."""
    shown = fixed(fraction, scale=100)
    return shown if shown == NA else shown + "%"


def gib(value: float | None, digits: int = 1) -> str:
    return fixed(value, digits, scale=1 / GIB)


def mem_used_total(used: float | None, total: float | None) -> str:
    if number(used) is None or number(total) is None:
        return NA
    return f"{gib(used, 1)}/{gib(total, 0)}G"


def watts(value: float | None) -> str:
    return fixed(value)


def power_draw_cap(draw: float | None, cap: float | None) -> str:
    return f"{watts(draw)}/{watts(cap)}W"


# PCIe traffic below this is a card's housekeeping, not work: an idle H200's byte counters read
# 30-60 KB/s RX and 340-370 KB/s TX, with ticks of 0.33-0.71 MB/s, a new value every second
# (benchmarks/results/sampling_idle_h200_2026-12-01.json). Shown to 3 digits it rewrote both rate
# fields of the table and the detail panel every second at idle (issue 13); 1 MB/s is 0.003 % of
# a gen4 x16 link, and the simulated rigs count a GPU as moving data from 1 MB/s too.
QUIET_BYTES_PER_S = 1e6
QUIET = "<1M"


def rate(bytes_per_s: float | None) -> str:
    """Bytes/s as 12.3G, 456M, 7.0M (per second implied by the column); below 1 MB/s, idle
    traffic, "<1M" (a negative reading prints as read)."""
    known = number(bytes_per_s)
    if known is None:
        return NA
    if known >= 1e12:  # beyond any PCIe link: a bad reading, kept short
        return f"{known:.0e}"
    if 0 <= known < QUIET_BYTES_PER_S:
        return QUIET
    for unit, scale in (("G", 1e9), ("M", 1e6)):
        if known >= scale:
            value = known / scale
            return f"{value:.1f}{unit}" if value < 100 else f"{value:.0f}{unit}"
    return fixed(known) + "B"


def celsius(value: float | None) -> str:
    shown = fixed(value)
    return shown if shown == NA else shown + "C"


def link(gen: int | None, width: int | None) -> str:
    def part(value: Any) -> str:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 1000 else "?"
    return f"{part(gen)}x{part(width)}"


def mhz(value: float | None) -> str:
    return fixed(value)


def bar(fraction: float | None, width: int) -> str:
    """A text bar of `width` cells, eighth-block resolution."""
    fraction = number(fraction)
    if fraction is None:
        return NA.ljust(width)
    blocks = " ▏▎▍▌▋▊▉█"
    eighths = round(max(0.0, min(1.0, fraction)) * width * 8)
    full, rest = divmod(eighths, 8)
    text = "█" * full + (blocks[rest] if rest else "")
    return text.ljust(width)


SPARK = "▁▂▃▄▅▆▇█"


def spark(values: list[float | None], width: int, top: float | None = None, relative: bool = False) -> str:
    """The last `width` values as one line of block characters, scaled 0..`top` (or the max);
    `relative` scales min..max instead, for a trend such as a loss curve."""
    tail = (values if isinstance(values, list) else [])[-width:]
    floats = finite_floats(tail)  # a history as the hub keeps it: no `number` per value
    recent = list(floats) if floats is not None else [number(v) for v in tail]  # NaN, inf: gaps
    known = [v for v in recent if v is not None]
    bottom = min(known) if relative and known else 0.0
    top = number(top) or (max(known) if known else 0.0)
    # Halved, so that top - bottom cannot overflow for readings near ±1.8e308.
    half_scale = top / 2 - bottom / 2
    if half_scale <= 0:
        return "".join([" " if value is None or not relative else SPARK[0] for value in recent]).rjust(width)
    # each value's share of the scale, clamped to 0..1 by comparisons (inf for a subnormal scale: 1), then
    # its level rounded half up; one call a value, not four (a sparkline is drawn whenever its values move)
    steps = len(SPARK) - 1
    return "".join([" " if value is None else SPARK[int((0.0 if share <= 0.0 else 1.0 if share >= 1.0 else share) * steps + 0.5)]
                    for value in recent for share in (0.0 if value is None else (value / 2 - bottom / 2) / half_scale,)]
                   ).rjust(width)


_FLOAT_OR_NONE = frozenset({float, type(None)})


def finite_floats(values: Any) -> tuple[float | None, ...] | None:
    """`values` as a tuple when it is a list of finite floats and None only, each already what
    `number` makes of it (a history as the hub keeps it); else None. The tuple is hashable, and
    holds no True that a cache would take for the 1 it equals. A few calls in C, not one `number`
    per value (a busy snapshot's charts and sparklines are a few hundred values)."""
    if type(values) is not list or not _FLOAT_OR_NONE.issuperset(map(type, values)):
        return None
    recent = tuple(values)
    return recent if all(map(math.isfinite, [value for value in recent if value is not None])) else None


def held_spark(values: list[float | None], width: int, top: float | None = None) -> str:
    """`spark(values, width, top)` of a history drawn again unchanged for several snapshots (the
    dashboard holds it: gpumix.tui.held_history): the same values give the line drawn last time."""
    recent = finite_floats(values[-width:]) if isinstance(values, list) else None
    if recent is None:
        return spark(values, width, top)
    return _spark_of(recent, width, number(top))


@functools.lru_cache(maxsize=16)  # the detail panel's four sparklines, and a few sizes
def _spark_of(recent: tuple[float | None, ...], width: int, top: float | None) -> str:
    return spark(list(recent), width, top)
