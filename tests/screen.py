"""Plain-text screenshots of a running Textual app, for snapshot tests."""

from __future__ import annotations

import asyncio
import io
import os
import tempfile
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


UPDATE_ENV = "GPUMIX_UPDATE_SNAPSHOTS"  # set to 1 to (re)write the expected screens, on purpose


def assert_matches_snapshot(text: str, name: str, folder: Path = SNAPSHOTS) -> None:
    """Compare with FOLDER/NAME.txt. A missing snapshot fails (it never writes itself); only
    GPUMIX_UPDATE_SNAPSHOTS=1 writes it, as a separate, deliberate run whose result is committed."""
    path = folder / f"{name}.txt"
    if os.environ.get(UPDATE_ENV) == "1":
        path.write_text(text + "\n")
    assert path.exists(), f"no snapshot {path}: run with {UPDATE_ENV}=1 to write it, look at it, commit it:\n{text}"
    expected = path.read_text().rstrip("\n")
    assert text == expected, f"screen differs from {path} ({UPDATE_ENV}=1 to accept):\n{text}"


SVG_SNAPSHOTS = SNAPSHOTS / "svg"


def assert_matches_svg(svg: str, name: str, folder: Path = SVG_SNAPSHOTS, drawn: Path | None = None) -> str | None:
    """Compare an SVG screenshot with FOLDER/NAME.svg, as assert_matches_snapshot does text: a missing
    snapshot fails and is never written, except with GPUMIX_UPDATE_SNAPSHOTS=1. Returns None when it
    matches, else why not (callers collect every screen's answer before failing); the screen that
    was drawn is kept under `drawn` ($TMPDIR/gpumix-svg-actual/) to be opened beside the expected one."""
    path = folder / f"{name}.svg"
    if os.environ.get(UPDATE_ENV) == "1":
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(svg)
    if path.exists() and path.read_text() == svg:
        return None
    actual = (drawn or Path(tempfile.gettempdir()) / "gpumix-svg-actual") / f"{name}.svg"
    actual.parent.mkdir(parents=True, exist_ok=True)
    actual.write_text(svg)
    if not path.exists():
        return f"no snapshot {path} (drawn: {actual}; {UPDATE_ENV}=1 to write it, look at it, commit it)"
    return f"{path} differs from the screen drawn, {actual} ({UPDATE_ENV}=1 to accept)"


async def started(pilot, app: App, deadline_s: float = 20.0, tries: int | None = None) -> None:
    """Wait (up to deadline_s, a shared box can be slow) until the app has rendered its first snapshot.
    `tries` is the old spelling (x 20 ms); the deadline is never shorter than deadline_s."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while not getattr(app, "renders", 0) and loop.time() < end:
        await pilot.pause(0.02)
    assert getattr(app, "renders", 0), "the app never rendered a snapshot"
