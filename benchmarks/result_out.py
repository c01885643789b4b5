"""A benchmark's result, as the scripts here leave it: the JSON on stdout and, with --out, in that file.
Imported by sibling scripts run as `python benchmarks/NAME.py` (their folder is then on sys.path)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def report(result: dict[str, Any], out: Path | None, indent: int = 1) -> int:
    """Print the result as JSON, write it to `out` too where given; the script's exit code (0)."""
    text = json.dumps(result, indent=indent)
    print(text)
    if out:
        out.write_text(text + "\n")
    return 0
