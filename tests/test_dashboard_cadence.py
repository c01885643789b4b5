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


async def test_a_new_timestamp_repaints_the_title_without_a_layout_pass(demo_hub: Hub) -> None:
    """The title, run and host lines are TextPanels: a clock that moved repaints its columns only
    (a Static laid the whole screen out again and rewrote the line)."""
    from gpumix.tui.text_panel import TextPanel

    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        assert all(isinstance(app.query_one(f"#{name}"), TextPanel) for name in ("title", "run", "host"))
        snapshot = demo_hub.snapshot()
        app.render_snapshot(snapshot)
        await pilot.pause()
        title = app.query_one("#title", TextPanel)
        relayouts, before = title.relayouts, title.text
        app.render_snapshot({**snapshot, "timestamp_s": snapshot["timestamp_s"] + 60.0})  # the minute moves
        await pilot.pause()
        assert title.text != before  # the clock moved
        assert title.relayouts == relayouts  # its columns repainted, no layout pass asked for
