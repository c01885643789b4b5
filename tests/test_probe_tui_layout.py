"""The probe's confirmation (`m`) inside gpumix-top at 80x24: both buttons whole and labelled, whatever
the text says (issue 14's dialog; the app's stylesheet once sized its Run button as the run line)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from textual.widgets import Button

from gpumix.tui import probe_screen
from gpumix.tui.app import GpumixApp
from gpumix.tui.probe_screen import ProbeConfirm, ProbeScreen, results_text
from tests.screen import screen_text, started
from tests.test_probe_screen import H200_PAIR, fake_probe
from tests.tui_world import job_hub
from tests.waiting import wait_until_async

pytestmark = pytest.mark.usefixtures("tui_env")
NARROW = (80, 24)


async def wait_for(pilot: Any, predicate: Any, what: str, timeout_s: float = 15.0) -> Any:
    return await wait_until_async(predicate, timeout_s, what, pause=pilot.pause)


def whole(button: Button, app: GpumixApp) -> bool:
    """Drawn at its full height (border, label, border) and inside the terminal."""
    return button.region.height == 3 and app.screen.region.contains_region(button.region)


async def test_m_asks_with_both_buttons_whole_and_enter_runs_the_probe(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(probe_screen, "PROBE_COMMAND", fake_probe(tmp_path, H200_PAIR.read_text()))
    monkeypatch.setattr(probe_screen, "socket", SimpleNamespace(gethostname=lambda: "laptop"))
    app = GpumixApp(job_hub(), interval_s=60)
    async with app.run_test(size=NARROW) as pilot:
        await started(pilot, app)
        await pilot.press("m")
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, ProbeConfirm) and app.screen, "the confirmation")
        await wait_for(pilot, lambda: "This monitor shows rig01 (sim:mixed-10)" in screen_text(app), "its text drawn")
        assert all(whole(button, app) for button in dialog.query(Button)), [b.region for b in dialog.query(Button)]
        text = screen_text(app)
        assert "Run the probe" in text and "Cancel" in text and "Enter runs it, Esc cancels." in text
        await pilot.press("enter")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, ProbeScreen) and app.screen, "the probe's screen")
        await wait_for(pilot, lambda: screen.report is not None, "the probe's results")
        await wait_for(pilot, lambda: "No findings" in screen_text(app), "the results drawn")
        assert "b Budget" in screen_text(app).splitlines()[-1]  # a compact footer, as the other screens: "b Budge" before


async def test_a_long_confirmation_scrolls_and_keeps_its_buttons(monkeypatch) -> None:
    app = GpumixApp(job_hub(), interval_s=60)
    long = {"hostname": "h" * 200, "source": "nvml",
            "ranks": [{"rank": i, "job": f"job-{i}-" + "x" * 60, "connected": True} for i in range(8)]}
    async with app.run_test(size=NARROW) as pilot:
        await started(pilot, app)
        app.push_screen(ProbeConfirm(long, local_host="l" * 200))
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, ProbeConfirm) and app.screen, "the confirmation")
        await wait_for(pilot, lambda: "Run the probe" in screen_text(app), "its buttons drawn")
        assert all(whole(button, app) for button in dialog.query(Button)), [b.region for b in dialog.query(Button)]


def test_one_blank_line_before_the_findings() -> None:
    report = json.loads(H200_PAIR.read_text())
    for refused in ([], [{"gpu": 2, "reason": "busy"}]):  # after the all-reduce floor's list, after a refusal
        text = results_text({**report, "refused": refused}).plain
        assert "\n\nNo findings" in text and "\n\n\nNo findings" not in text
