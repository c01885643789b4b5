"""The dashboard's history cadence under Textual's Pilot (tui/held_history.py, GpumixApp): the
sparklines and charts take the newest history every few snapshots, so the polls fetch it only
then; the charts screen gets it every time."""

from __future__ import annotations

import pytest

from gpumix.hub import Hub
from gpumix.tui.app import GpumixApp
from gpumix.tui.held_history import EVERY_SNAPSHOTS, HeldHistory
from gpumix.tui.screens import GpuChartsScreen
from tests.screen import started

pytestmark = pytest.mark.usefixtures("tui_env")


def test_due_says_when_the_next_offer_takes() -> None:
    held = HeldHistory(every=3)
    assert held.due(0)  # nothing held
    held.offer({(0, "util_gpu_pct"): [1.0]})
    assert not held.due(0) and held.due(1)  # another GPU: at once
    held.offer({(0, "util_gpu_pct"): [1.0]})
    assert not held.due(0)
    held.offer({(0, "util_gpu_pct"): [1.0]})
    assert held.due(0)  # the third offer since it was taken: the next one takes
    assert held.offer({(0, "util_gpu_pct"): [2.0]})


async def test_polls_fetch_the_history_only_when_it_will_be_drawn(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        wanted = []
        for _ in range(2 * EVERY_SNAPSHOTS):
            app.render_snapshot(demo_hub.snapshot())
            wanted.append(app._series_index)
        assert wanted.count(0) == 2 and wanted.count(None) == 2 * EVERY_SNAPSHOTS - 2, wanted
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, GpuChartsScreen)
        for _ in range(3):
            app.render_snapshot(demo_hub.snapshot())
            assert app._series_index == 0  # the charts draw every sample
