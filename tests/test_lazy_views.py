"""The dashboard's views load when first opened (tui/navigation.py; issue 13: the dashboard's RSS): help,
topology, processes, a GPU's charts, ranks, findings and tiers, with the charts, dialog and topology modules
they use, are not loaded by the first paint, and each opens from its key as before."""

from __future__ import annotations

import json
import subprocess
import sys

VIEWS = ("gpumix.tui.screens", "gpumix.tui.ranks_screen", "gpumix.tui.advice_screens", "gpumix.tui.dialog",
         "gpumix.hw.topology")

RUN_THE_DASHBOARD = """
import asyncio, json, sys
from gpumix.cli.hardware import simulated_hardware
from gpumix.hub import Hub
from gpumix.sim.rig import load_builtin_rig
from gpumix.tui.app import GpumixApp

VIEWS = sys.argv[1:]

async def main():
    hub = Hub(simulated_hardware(load_builtin_rig("mixed-10")))
    hub.tick()
    app = GpumixApp(hub, interval_s=60)
    async with app.run_test(size=(160, 48)) as pilot:
        for _ in range(500):
            if app.snapshot is not None:
                break
            await pilot.pause(0.02)
        await pilot.pause(0.2)
        first_paint = [name for name in VIEWS if name in sys.modules]
        opened = []
        for key in ("question_mark", "t", "p", "enter", "r", "f", "g"):
            await pilot.press(key)
            await pilot.pause(0.2)
            opened.append(type(app.screen).__name__)
            if key == "enter":  # the charts again: one charts screen, not two stacked
                stack = len(app.screen_stack)
                app.action_charts()
                await pilot.pause(0.1)
                opened.append(len(app.screen_stack) - stack)
            await pilot.press("escape")
            await pilot.pause(0.1)
        return first_paint, opened

first_paint, opened = asyncio.run(main())
print(json.dumps({"first_paint": first_paint, "opened": opened}))
"""


def test_the_first_paint_loads_no_view_and_each_opens_from_its_key() -> None:
    result = subprocess.run([sys.executable, "-c", RUN_THE_DASHBOARD, *VIEWS], capture_output=True, text=True, cwd="/",
                            env={"TZ": "UTC", "PATH": "/usr/bin:/bin", "TERM": "xterm-256color"}, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["first_paint"] == []
    assert outcome["opened"] == ["HelpScreen", "TopologyScreen", "ProcessesScreen", "GpuChartsScreen", 0,
                                 "RanksScreen", "FindingsScreen", "TiersScreen"]
