"""A hub that answers with the same readings (its sampler or the GPUs' driver hung) is said, as a hub
that stops answering is: the title's clock shows minutes only (issue 13), so a stamp that no longer
moves would otherwise go unseen. A hub that ticks slower than the monitor polls is not frozen, and a
paused replay repeats its readings on purpose. Real Textual under Pilot; time moves through the
snapshots' stamps and the watch's arrival times."""

from __future__ import annotations

import re
import time

import pytest

from gpumix.hub import Hub
from gpumix.tui.app import GpumixApp
from gpumix.tui.text_panel import TextPanel
from tests.screen import started
from tests.test_tui_quiet_idle import MINUTE_S, at

pytestmark = pytest.mark.usefixtures("tui_env")


def age(app: GpumixApp, seconds: float) -> None:
    """The newest readings came `seconds` ago."""
    app._received_at_s = time.monotonic() - seconds


async def test_the_same_readings_again_and_again_are_said(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        title = app.query_one("#title", TextPanel)
        snapshot = demo_hub.snapshot()
        app._received(at(snapshot, MINUTE_S + 1))
        app._received(at(snapshot, MINUTE_S + 2))  # the hub reads once a second
        app.interval_s = 1.0
        age(app, 4)  # past three of the hub's 1 s readings
        app._received(at(snapshot, MINUTE_S + 2))  # then the same readings, answered just now
        app._check_stale()
        await pilot.pause()
        assert app.stale and app.has_class("-stale")
        assert re.match(r"hub answers, no new readings \([4-9] s\)", title.text), title.text  # 4 s and the test's own time
        assert any("no new readings" in str(n.message) for n in app._notifications)
        app._received(at(snapshot, MINUTE_S + 4))  # new readings
        await pilot.pause()
        assert not app.stale and title.text.endswith("10:54"), title.text


async def test_a_hub_ticking_slower_than_the_poll_is_not_frozen(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        snapshot = demo_hub.snapshot()
        app.interval_s = 1.0
        app._received(at(snapshot, MINUTE_S + 0))
        app._received(at(snapshot, MINUTE_S + 5))  # `gpumix hub --interval 5`
        age(app, 12)  # 12 s of the same readings: within three of the hub's own ticks
        app._received(at(snapshot, MINUTE_S + 5))
        app._check_stale()
        await pilot.pause()
        assert not app.stale
        assert app.stale_after_s == 15


async def test_a_paused_replay_repeats_its_readings_on_purpose(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    app.WATCH_READINGS = False  # as the replay's app says
    async with app.run_test(size=(80, 24)) as pilot:
        await started(pilot, app)
        snapshot = demo_hub.snapshot()
        app.interval_s = 1.0
        for stamp in (1, 2, 2, 2):
            app._received(at(snapshot, MINUTE_S + stamp))
        app._check_stale()
        await pilot.pause()
        assert not app.stale


def test_the_replay_app_does_not_watch_its_readings() -> None:
    from gpumix.tui.replay import ReplayApp

    assert ReplayApp.WATCH_READINGS is False and GpumixApp.WATCH_READINGS is True
