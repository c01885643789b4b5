"""The running dashboard in a fresh interpreter, for the tests of what it loads (what loads depends on what
loaded before, so each runs in its own): source text for a script that draws the dashboard, and the runner.

A test's script is: what must come first (stand-ins, a patched module), then DASHBOARD, then its own `body`
coroutine and `print(json.dumps(asyncio.run(drawn_then(body))))`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

# One simulated 10-GPU rig in-process, drawn at 160x48 once its first snapshot is in.
DASHBOARD = '''
import asyncio, json, sys
from gpumix.cli.hardware import simulated_hardware
from gpumix.hub import Hub
from gpumix.sim.rig import load_builtin_rig
from gpumix.tui.app import GpumixApp

async def drawn_then(body):
    """The dashboard drawn with its first snapshot, then `await body(app, pilot)`: its value."""
    hub = Hub(simulated_hardware(load_builtin_rig("mixed-10")))
    hub.tick()
    app = GpumixApp(hub, interval_s=60)
    async with app.run_test(size=(160, 48)) as pilot:
        for _ in range(500):
            if app.snapshot is not None:
                break
            await pilot.pause(0.02)
        assert app.snapshot is not None
        return await body(app, pilot)
'''


def run_fresh(code: str, *args: str) -> Any:
    """`python -c CODE ARGS...` from / with a bare environment; the JSON of its last line of output."""
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd="/",
                            env={"TZ": "UTC", "PATH": "/usr/bin:/bin", "TERM": "xterm-256color"}, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
