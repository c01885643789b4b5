"""Rich's cell-width table loaded when a character needs it (issue 13: the dashboard's RSS, ~0.2 MB).

`rich.cells.get_character_cell_size` loads the whole table (rich._unicode_data.unicode17-0-0) for any character it
is asked about, ASCII included, and a line with one character outside Rich's fast path (an en dash, an arrow, ✖)
asks it about every character of the line: the dashboard's first paint loads it. The function installed here
answers the characters of Rich's own one-cell set (`_SINGLE_CELLS`, what `cell_len` counts as one cell without
the table) and the dashboard's few others (KNOWN_WIDTHS) as Rich's table does (a test compares every one), and
asks Rich for any other. Installed before Textual loads (rich.segment and textual._wrap import the function by
name): tui/main.py's run_app, the interactive monitor only; nothing when Rich's names are not as expected.
"""

from __future__ import annotations

from collections.abc import Callable

import rich.cells

# the characters the dashboard draws outside Rich's one-cell set, and their width in Rich's table
KNOWN_WIDTHS: dict[str, int] = dict.fromkeys("–—•…←↑→↓≤⚠✖", 1)


def _widths(rich_size: Callable[..., int], single_cells: frozenset[str]) -> Callable[..., int]:
    def get_character_cell_size(character: str, unicode_version: str = "auto") -> int:
        """rich.cells.get_character_cell_size, without its table for a one-cell character Rich or we know."""
        if character in single_cells:
            return 1
        width = KNOWN_WIDTHS.get(character)
        return width if width is not None else rich_size(character, unicode_version)

    get_character_cell_size.rich_size = rich_size  # type: ignore[attr-defined]  # Rich's own, for tests
    return get_character_cell_size


def install() -> bool:
    """Put the table-free answer in rich.cells; True when installed (Rich's own function and set were there)."""
    rich_size = getattr(rich.cells, "get_character_cell_size", None)
    single_cells = getattr(rich.cells, "_SINGLE_CELLS", None)
    if rich_size is None or hasattr(rich_size, "rich_size") or not isinstance(single_cells, frozenset):
        return False
    rich.cells.get_character_cell_size = _widths(rich_size, single_cells)
    return True


INSTALLED = install()
