"""Short, fixed-width renderings of readings; None (not available) prints as N/A."""

from __future__ import annotations

NA = "N/A"
GIB = 1024**3


def pct(value: float | None) -> str:
    return NA if value is None else f"{value:.0f}%"


def gib(value: float | None, digits: int = 1) -> str:
    return NA if value is None else f"{value / GIB:.{digits}f}"


def mem_used_total(used: float | None, total: float | None) -> str:
    if used is None or total is None:
        return NA
    return f"{used / GIB:.1f}/{total / GIB:.0f}G"


def watts(value: float | None) -> str:
    return NA if value is None else f"{value:.0f}"


def power_draw_cap(draw: float | None, cap: float | None) -> str:
    return f"{watts(draw)}/{watts(cap)}W"


def rate(bytes_per_s: float | None) -> str:
    """Bytes/s as 12.3G, 456M, 7.0K (per second implied by the column)."""
    if bytes_per_s is None:
        return NA
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if bytes_per_s >= scale:
            value = bytes_per_s / scale
            return f"{value:.1f}{unit}" if value < 100 else f"{value:.0f}{unit}"
    return f"{bytes_per_s:.0f}B"


def celsius(value: float | None) -> str:
    return NA if value is None else f"{value:.0f}C"


def link(gen: int | None, width: int | None) -> str:
    return f"{gen or '?'}x{width or '?'}"


def mhz(value: float | None) -> str:
    return NA if value is None else f"{value:.0f}"


def bar(fraction: float | None, width: int) -> str:
    """A text bar of `width` cells, eighth-block resolution."""
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
    recent = values[-width:]
    known = [v for v in recent if v is not None]
    bottom = min(known) if relative and known else 0.0
    scale = (top if top else (max(known) if known else 0.0)) - bottom
    chars = []
    for value in recent:
        if value is None or scale <= 0:
            chars.append(" " if value is None or not relative else SPARK[0])
        else:
            level = max(0, min(len(SPARK) - 1, int((value - bottom) / scale * (len(SPARK) - 1) + 0.5)))
            chars.append(SPARK[level])
    return "".join(chars).rjust(width)
