"""A history line chart as text, on a fixed scale whose every labelled row is exactly its value.

Issue 12: plotext scaled each chart to its data (utilisation 97-100 %, PCIe 0.5068039-0.5068047), so
noise looked like full-scale swings, and its tick labels skipped rows (a flat 170 W line on the row
labelled 198.3). Here the scale runs from 0 to the metric's own full value (100 %, the cap, the
memory, the link), one row per step, and each row is labelled with its value; a value is drawn on
the row nearest to it, in braille dots of a quarter row. The x axis is seconds ago.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MIN_STEPS, MAX_STEPS = 4, 8  # rows above the 0 row: enough to read, five charts still fit a scroll
NICE_MANTISSAS = (1.0, 2.0, 2.5, 5.0)
MAX_DECIMALS = 2  # a step that needs more is not exact enough to label: a nice step instead
SMALLEST_FULL, LARGEST_FULL = 1e-3, 1e12  # a full scale outside is a bad reading: the data's own
DOTS_PER_ROW, DOTS_PER_COLUMN = 4, 2  # a braille cell
BRAILLE_BASE = 0x2800
# dot bit of (column 0/1, dot row 0..3 from the top), as Unicode numbers braille dots
BRAILLE_BITS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
TIME_STEPS_S = (0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200)
X_UNIT = "seconds ago"


def _decimals(step: float) -> int | None:
    """Decimals that write `step` exactly (0, 1 or 2), or None."""
    for decimals in range(MAX_DECIMALS + 1):
        if abs(round(step, decimals) - step) <= 1e-9 * step:
            return decimals
    return None


def _is_nice(step: float) -> bool:
    mantissa = step / 10 ** math.floor(math.log10(step))
    return any(math.isclose(mantissa, nice, rel_tol=1e-9) for nice in NICE_MANTISSAS)


@dataclass(frozen=True)
class Scale:
    """Rows 0, step, 2·step, ... top; row r shows the values within half a step of r·step."""

    step: float
    steps: int
    decimals: int

    @property
    def top(self) -> float:
        return self.step * self.steps

    @property
    def rows(self) -> int:
        return self.steps + 1

    def value_of_row(self, row: int) -> float:
        """Row 0 is the bottom one."""
        return row * self.step

    def label(self, row: int) -> str:
        return f"{self.value_of_row(row):.{self.decimals}f}"


def fixed_scale(full: float) -> Scale:
    """A scale from 0 to `full` in MIN_STEPS..MAX_STEPS rows when a step writes exactly (a nice
    one, such as 25, before any other, such as 34; then the most rows); else nice steps up to the
    first row at or above `full` (31.5 GB/s: 0 to 35 by 5)."""
    full = min(max(full, SMALLEST_FULL), LARGEST_FULL)
    exact = []
    for steps in range(MIN_STEPS, MAX_STEPS + 1):
        step = full / steps
        decimals = _decimals(step)
        if decimals is not None:
            exact.append((decimals, not _is_nice(step), -steps, Scale(step, steps, decimals)))
    if exact:
        return min(exact, key=lambda choice: choice[:3])[3]
    magnitude = 10 ** math.floor(math.log10(full / MAX_STEPS))
    for step in (mantissa * magnitude * ten for ten in (1, 10) for mantissa in NICE_MANTISSAS):
        steps = max(MIN_STEPS, math.ceil(full / step - 1e-9))
        if steps <= MAX_STEPS:
            decimals = next((d for d in range(7) if abs(round(step, d) - step) <= 1e-9 * step), 6)
            return Scale(step, steps, decimals)
    raise AssertionError("a nice step always fits")  # ten times the magnitude is at least full/MAX_STEPS·10


def data_full_scale(values: Sequence[float | None]) -> float:
    """The full scale of a metric that has no known maximum: its largest value (1 when none)."""
    known = [abs(v) for v in values if v is not None]
    return max(known, default=0.0) or 1.0


def _time_step_s(span_s: float, columns: int, label_chars: int) -> float:
    """Seconds between x labels: the first step whose labels stay apart."""
    for step in TIME_STEPS_S:
        if step * columns / span_s >= label_chars + 2:
            return step
    return span_s


def _time_labels(span_s: float, columns: int) -> str:
    """The row of x labels: seconds ago, one format for all, each centred on its column."""
    widest = len(f"{span_s:.0f}") + 2
    step = _time_step_s(span_s, columns, widest)
    decimals = _decimals(step) or 0
    row = [" "] * (columns + widest)
    ago = 0.0
    while ago <= span_s + 1e-9:
        text = f"{ago:.{decimals}f}"
        column = round((span_s - ago) / span_s * (columns - 1))
        start = min(max(column - len(text) // 2, 0), columns + widest - len(text))
        if all(cell == " " for cell in row[max(start - 1, 0):start + len(text) + 1]):
            row[start:start + len(text)] = text
        ago += step
    return "".join(row).rstrip()


def _dot_masks(values: Sequence[float | None], scale: Scale, dot_columns: int) -> list[int]:
    """For each dot column, the dot rows the line passes as bits (bit d: dot row d from the bottom);
    neighbouring values joined by a straight line, gaps (None) left open."""
    masks = [0] * dot_columns
    last = len(values) - 1
    top_dot = scale.rows * DOTS_PER_ROW - 1
    per_value = DOTS_PER_ROW / scale.step
    previous: tuple[int, int] | None = None  # (dot column, dot row) of the last known value
    for index, value in enumerate(values):
        if value is None:
            previous = None
            continue
        column = dot_columns - 1 if last == 0 else round(index * (dot_columns - 1) / last)
        dot = min(max(math.floor(value * per_value + DOTS_PER_ROW / 2), 0), top_dot)  # a quarter row each
        from_column, from_dot = previous if previous is not None else (column, dot)
        if column - from_column <= 1:  # the common case (more values than columns): one vertical stroke
            low, high = min(from_dot, dot), max(from_dot, dot)
            masks[column] |= (1 << (high + 1)) - (1 << low)
        else:  # fewer values than columns: a straight line across the columns between them
            span = column - from_column
            for step in range(1, span + 1):
                low_dot = round(from_dot + (dot - from_dot) * (step - 1) / span)
                high_dot = round(from_dot + (dot - from_dot) * step / span)
                low, high = min(low_dot, high_dot), max(low_dot, high_dot)
                masks[from_column + step] |= (1 << (high + 1)) - (1 << low)
        previous = (column, dot)
    return masks


# braille bits of one dot column's four dots (bit 0 the bottom dot), left and right side
_BRAILLE_OF_NIBBLE = [[sum(BRAILLE_BITS[side][DOTS_PER_ROW - 1 - d] for d in range(DOTS_PER_ROW) if nibble >> d & 1)
                       for nibble in range(16)] for side in range(DOTS_PER_COLUMN)]


def line_chart(values: Sequence[float | None], scale: Scale, width: int, interval_s: float, title: str) -> str:
    """`values` oldest first, `interval_s` apart, the last one now; what is no float is a gap.
    Title, one line per row (its value, then the line), the x axis, its labels and its unit."""
    gutter = max(len(scale.label(row)) for row in range(scale.rows)) + 1
    columns = max(width - gutter - 1, 8)
    span_s = max((len(values) - 1) * interval_s, interval_s, 1e-3)
    # a gap: None, NaN, inf, anything not a float, and readings beyond any physical one
    known = [v if isinstance(v, float) and -LARGEST_FULL <= v <= LARGEST_FULL else None for v in values]
    masks = _dot_masks(known, scale, columns * DOTS_PER_COLUMN)
    left, right = _BRAILLE_OF_NIBBLE
    cells = [[left[masks[2 * c] >> shift & 15] | right[masks[2 * c + 1] >> shift & 15] for c in range(columns)]
             for shift in range(0, scale.rows * DOTS_PER_ROW, DOTS_PER_ROW)]  # row 0 at the bottom
    lines = [title]
    for row in reversed(range(scale.rows)):
        plot = "".join(chr(BRAILLE_BASE + bits) if bits else " " for bits in cells[row]).rstrip()
        lines.append(f"{scale.label(row):>{gutter - 1}} ┤{plot}")
    lines.append(" " * gutter + "└" + "─" * columns)
    lines.append(" " * (gutter + 1) + _time_labels(span_s, columns))
    lines.append(" " * (gutter + 1) + X_UNIT.center(columns).rstrip())
    return "\n".join(lines)
