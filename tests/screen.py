"""Plain-text screenshots of a running Textual app, for snapshot tests."""

from __future__ import annotations

import io
import os
from pathlib import Path

from rich.console import Console
from textual.app import App

SNAPSHOTS = Path(__file__).parent / "snapshots"


def screen_text(app: App) -> str:
    """What the terminal shows, as text (the same render as App.export_screenshot)."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor", record=True, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return "\n".join(line.rstrip() for line in console.export_text().splitlines())


def assert_matches_snapshot(text: str, name: str) -> None:
    """Compare with tests/snapshots/NAME.txt; UPDATE_SNAPSHOTS=1 rewrites it."""
    path = SNAPSHOTS / f"{name}.txt"
    if os.environ.get("UPDATE_SNAPSHOTS") or not path.exists():
        path.write_text(text + "\n")
    expected = path.read_text().rstrip("\n")
    assert text == expected, f"screen differs from {path} (UPDATE_SNAPSHOTS=1 to accept):\n{text}"


async def started(pilot, app: App, tries: int = 50) -> None:
    """Wait (tries x 20 ms) until the app has rendered its first snapshot."""
    for _ in range(tries):
        if getattr(app, "renders", 0):
            break
        await pilot.pause(0.02)
    assert getattr(app, "renders", 0), "the app never rendered a snapshot"
