"""Rich's cell-width table loaded only when a character needs it (gpumix/cli/lazy_cell_table.py; issue 13: the
dashboard's RSS, ~0.2 MB): every character answered without it gets the width Rich's table gives, Rich's and
Textual's modules that import the function by name get this one, and a character Rich's table must answer
still loads it. In a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

CODE = """
import json, sys
import gpumix.cli.lazy_cell_table as lazy
import rich.cells, rich.segment, textual._wrap
from rich.cells import cell_len
ours = rich.cells.get_character_cell_size
drawn = cell_len("util 0–100 % → 3.2 GB… ✖ ↑↓ •")
loaded_by_drawing = any("unicode17" in name or "unicode1" in name for name in sys.modules if name.startswith("rich._unicode_data.u"))
answered = sorted(rich.cells._SINGLE_CELLS | set(lazy.KNOWN_WIDTHS))
differ = [hex(ord(c)) for c in answered if ours(c) != ours.rich_size(c)]  # Rich's own (loads its table)
wide = ours("漢")
print(json.dumps({"installed": lazy.INSTALLED, "drawn": drawn, "loaded_by_drawing": loaded_by_drawing,
                  "answered": len(answered), "differ": differ, "wide": wide,
                  "bound": rich.segment.get_character_cell_size is ours and textual._wrap.get_character_cell_size is ours}))
"""


def test_every_character_answered_without_the_table_is_as_wide_as_richs_table_says() -> None:
    result = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, cwd="/", timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["installed"] is True and outcome["bound"] is True
    assert outcome["drawn"] == 29 and outcome["loaded_by_drawing"] is False  # the dashboard's characters: no table
    assert outcome["answered"] > 1400 and outcome["differ"] == []
    assert outcome["wide"] == 2  # a character Rich's table must answer still gets its width
