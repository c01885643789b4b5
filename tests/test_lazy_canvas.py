"""textual.canvas (with its box-drawing table) loads when a keyline is first drawn (gpumix/cli/lazy_stand_ins.py;
issue 13: the dashboard's RSS): the dashboard's imports leave it out, and a grid with keylines draws as without the
stand-in. Each in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

DRAW = """
    LAZY
    import asyncio, json, sys
    from textual.app import App
    from textual.containers import Grid
    from textual.widgets import Static
    before = type(sys.modules.get("textual.canvas")).__name__

    class Keylines(App):
        CSS = "Grid { grid-size: 2; keyline: heavy red; } Static { height: 3; }"

        def compose(self):
            with Grid():
                for n in range(4):
                    yield Static(str(n))

    async def main():
        app = Keylines()
        async with app.run_test(size=(30, 10)) as pilot:
            await pilot.pause()
            return app.export_screenshot()

    svg = asyncio.run(main())
    print(json.dumps({"before": before, "svg": svg, "after": type(sys.modules["textual.canvas"]).__name__}))
"""


def run(lazy: bool) -> dict:
    code = textwrap.dedent(DRAW).replace("LAZY", "import gpumix.cli.lazy_stand_ins" if lazy else "pass")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd="/",
                            env={"PATH": "/usr/bin:/bin", "TERM": "xterm-256color"})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_keylines_draw_as_without_the_stand_in() -> None:
    lazy, real = run(lazy=True), run(lazy=False)
    assert lazy["before"] == "StandInModule" and lazy["after"] == real["after"] == "module"
    assert lazy["svg"] == real["svg"] and "┃" in real["svg"]  # heavy keylines drawn
