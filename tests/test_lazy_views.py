"""The dashboard's views load when first opened (tui/navigation.py; issue 13: the dashboard's RSS): help,
topology, processes, a GPU's charts, ranks, findings and tiers, with the charts, dialog and topology modules
they use, are not loaded by the first paint, and each opens from its key as before."""

from __future__ import annotations

from tests.dashboard_script import DASHBOARD, run_fresh

VIEWS = ("gpumix.tui.screens", "gpumix.tui.ranks_screen", "gpumix.tui.advice_screens", "gpumix.tui.dialog",
         "gpumix.hw.topology")

RUN_THE_DASHBOARD = DASHBOARD + """
VIEWS = sys.argv[1:]

async def body(app, pilot):
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
    return {"first_paint": first_paint, "opened": opened}

print(json.dumps(asyncio.run(drawn_then(body))))
"""


def test_the_first_paint_loads_no_view_and_each_opens_from_its_key() -> None:
    outcome = run_fresh(RUN_THE_DASHBOARD, *VIEWS)
    assert outcome["first_paint"] == []
    assert outcome["opened"] == ["HelpScreen", "TopologyScreen", "ProcessesScreen", "GpuChartsScreen", 0,
                                 "RanksScreen", "FindingsScreen", "TiersScreen"]
