"""The layout adapts to the terminal (issue 12, items 5-7 and 10), under Textual's Pilot on a hub
with a ten-rank job: below 80x24 one notice; at 80x24 every dialog's result and buttons in view,
Enter applies the focused default, the ranks view's first-read columns without scrolling, the
detail panel's lines whole; at 120x40 a wider GPU table and taller charts; marks add up and clear."""

from __future__ import annotations

from typing import Any

import pytest
from textual.containers import VerticalScroll
from textual.geometry import Region
from textual.widget import Widget
from textual.widgets import Button, DataTable, Static
from textual.widgets._toast import Toast

from gpumix.hub import Hub
from gpumix.tui.app import GpumixApp
from gpumix.tui.gpu_table import GpuTable
from gpumix.tui.plan_screen import PlanScreen
from gpumix.tui.power_screens import ConfirmScreen, FitScreen, PowerDialog
from gpumix.tui.ranks_screen import RanksScreen
from gpumix.tui.size_notice import TooSmallScreen
from tests.screen import screen_text, started
from tests.tui_world import job_hub
from tests.waiting import wait_until_async

pytestmark = pytest.mark.usefixtures("tui_env")

SMALL, NARROW, WIDE = (60, 20), (80, 24), (120, 40)


class Recording:
    """The hub, with every control the app sends kept (a replan needs a supervisor to succeed)."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.controls: list[dict[str, Any]] = []

    def snapshot(self) -> dict[str, Any] | None:
        return self.hub.snapshot()

    def series(self, index: int, name: str) -> list[float | None]:
        return self.hub.series(index, name)

    def control(self, request: dict[str, Any]) -> dict[str, Any]:
        self.controls.append(request)
        return self.hub.control(request)


async def wait_for(pilot: Any, predicate: Any, what: str, timeout_s: float = 10.0) -> Any:
    return await wait_until_async(predicate, timeout_s, what, pause=pilot.pause)


def within(widget: Widget, screen: Region) -> bool:
    region = widget.region
    return region.area > 0 and screen.contains_region(region)


def footer_line(app: GpumixApp) -> str:
    return screen_text(app).splitlines()[-1]


# -- below 80x24 --------------------------------------------------------------------------------


async def test_below_80x24_one_notice_instead_of_clipped_controls() -> None:
    app = GpumixApp(job_hub(), interval_s=60)
    async with app.run_test(size=SMALL) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, TooSmallScreen), "the notice")
        await pilot.pause()
        text = screen_text(app)
        assert "terminal too small (need 80x24, have 60x20)" in text
        assert "PCIe link" not in text and "Cap" not in text  # no clipped table, no half footer
        await pilot.press("c", "s", "t")  # nothing opens behind or above the notice
        assert isinstance(app.screen, TooSmallScreen) and len(app.screen_stack) == 2
        await pilot.resize_terminal(80, 20)  # wide enough, still too short
        await wait_for(pilot, lambda: "have 80x20" in screen_text(app), "the notice following the size")
        await pilot.resize_terminal(*NARROW)
        await wait_for(pilot, lambda: not isinstance(app.screen, TooSmallScreen), "the dashboard back")
        await wait_for(pilot, lambda: "PCIe link" in screen_text(app), "the table drawn again")
        assert "too small" not in screen_text(app)


# -- 80x24: dialogs, Enter, toasts, the ranks view, the detail panel -----------------------------------


async def test_every_dialog_has_its_result_and_buttons_in_view_at_80x24() -> None:
    app = GpumixApp(job_hub(), interval_s=60)
    async with app.run_test(size=NARROW) as pilot:
        await started(pilot, app)
        screen = app.screen.region
        await pilot.press("T", "c")  # three GPUs marked: the tallest cap dialog
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, PowerDialog) and app.screen, "the cap dialog")
        await pilot.pause()
        assert all(within(button, screen) for button in dialog.query(Button)), [b.region for b in dialog.query(Button)]
        assert within(dialog.query_one("#watts"), screen)
        await pilot.press(*"150", "enter")
        confirm = await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen, "the confirmation")
        await pilot.pause()
        assert all(within(button, screen) for button in confirm.query(Button))
        await pilot.press("escape", "b")
        fit = await wait_for(pilot, lambda: isinstance(app.screen, FitScreen) and app.screen, "the fit dialog")
        await pilot.pause()
        assert all(within(button, screen) for button in fit.query(Button))
        assert within(fit.query_one(VerticalScroll), screen)  # the proposal scrolls inside it
        assert "caps 3300 → 2800 W" in screen_text(app)  # its headline, the result, on screen
        await pilot.press("escape", "s")
        plan = await wait_for(pilot, lambda: isinstance(app.screen, PlanScreen) and app.screen, "the split dialog")
        await pilot.pause()
        assert all(within(button, screen) for button in plan.query(Button)), [b.region for b in plan.query(Button)]
        result = plan.query_one("#plan-result", Static)
        assert within(result, screen)
        assert "proposed:" in str(result.render()) and "proposed:" in screen_text(app)
        assert "n_r: samples a step = m_r: micro-batch × k_r: accumulation steps" in screen_text(app)


async def test_enter_applies_the_focused_default_in_the_budget_and_split_dialogs() -> None:
    hub = job_hub()
    source = Recording(hub)
    app = GpumixApp(source, interval_s=60)
    async with app.run_test(size=NARROW) as pilot:
        await started(pilot, app)
        await pilot.press("b")
        await wait_for(pilot, lambda: isinstance(app.screen, FitScreen), "the fit dialog")
        await pilot.press("enter")  # the fit dialog is its own confirmation ("Apply these caps")
        await wait_for(pilot, lambda: any(c.get("action") == "caps" for c in source.controls), "the caps sent")
        assert sum(gpu.power_cap_w for gpu in hub.hardware.machine.gpus) <= 2800
        await wait_for(pilot, lambda: app.screen is app.main_screen, "back to the dashboard")
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(app.screen, PlanScreen), "the split dialog")
        await pilot.press("enter")
        confirm = await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen,
                                 "Enter: the restart's confirmation")
        assert "Restart job train into the proposed split" in str(confirm.query_one("#question", Static).render())
        assert not any(c["type"] == "replan" for c in source.controls)  # nothing restarts before the yes
        await pilot.press("y")
        sent = await wait_for(pilot, lambda: [c for c in source.controls if c["type"] == "replan"], "the replan sent")
        assert sent[0]["job"] == "train" and sent[0]["plan"]["ranks"]


async def test_cancelling_the_restarts_confirmation_restarts_nothing() -> None:
    source = Recording(job_hub())
    app = GpumixApp(source, interval_s=60)
    async with app.run_test(size=NARROW) as pilot:
        await started(pilot, app)
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(app.screen, PlanScreen), "the split dialog")
        await pilot.click("#apply")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the restart's confirmation")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is app.main_screen, "back to the dashboard")
        await pilot.pause(0.2)
        assert not any(c["type"] == "replan" for c in source.controls)


async def test_a_toast_covers_no_dialog_button() -> None:
    app = GpumixApp(job_hub(), interval_s=60)
    async with app.run_test(size=NARROW, notifications=True) as pilot:
        await started(pilot, app)
        app.say("set: GPU 0 cap 150 W (was 170 W) by trainer, and a long tail so the toast wraps " * 2)
        await pilot.press("c")
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, PowerDialog) and app.screen, "the cap dialog")
        toasts = await wait_for(pilot, lambda: [t for t in app.screen.query(Toast) if t.region.area], "the toast drawn")
        await pilot.pause()
        for button in dialog.query(Button):
            for toast in toasts:
                assert not button.region.overlaps(toast.region), (button.id, button.region, toast.region)


async def test_the_ranks_view_shows_peak_cpu_loss_and_trend_at_80_columns() -> None:
    app = GpumixApp(job_hub(), interval_s=60)
    async with app.run_test(size=NARROW) as pilot:
        await started(pilot, app)
        await pilot.press("r")
        ranks = await wait_for(pilot, lambda: isinstance(app.screen, RanksScreen) and app.screen, "the ranks view")
        table = ranks.query_one(DataTable)
        await wait_for(pilot, lambda: table.row_count == 10, "ten ranks")
        await pilot.pause()
        assert table.scroll_x == 0
        lines = screen_text(app).splitlines()
        header = next(line for line in lines if line.lstrip().startswith("Rank"))
        for label in ("Peak", "CPU%", "Loss", "Trend"):
            assert label in header, header
        row = next(line for line in lines if line.lstrip().startswith("0!"))  # rank 0, a straggler
        assert "9.5G" in row and "98%" in row and "1.0600" in row and "▁" in row, row


async def test_the_detail_panel_cuts_no_line_at_80x24(demo_hub: Hub) -> None:
    for hub in (job_hub(), demo_hub):  # the run line in two rows (a job's efficiency) and in one
        app = GpumixApp(hub, interval_s=60)
        async with app.run_test(size=NARROW) as pilot:
            await started(pilot, app)
            await pilot.pause()
            detail = str(app.query_one("#detail", Static).render())
            assert "…" not in detail, detail
            assert "link 4x4 max 4x4 card g4" in detail and "held by: power cap" in detail
    assert f"uuid {app.snapshot['gpus'][0]['uuid']}" in detail  # with one run line, the whole UUID too


async def test_the_footer_keeps_cap_budget_and_split_at_80_columns_with_marks() -> None:
    app = GpumixApp(job_hub(), interval_s=60)
    async with app.run_test(size=NARROW) as pilot:
        await started(pilot, app)
        await pilot.pause()
        assert "Unmark" not in footer_line(app)  # nothing to clear
        await pilot.press("space")
        await wait_for(pilot, lambda: "u Unmark" in footer_line(app), "u in the footer")
        for shown in ("c Cap", "b Budget", "s Split", "q Quit"):
            assert shown in footer_line(app), footer_line(app)


# -- 120x40 ---------------------------------------------------------------------------------------


async def test_at_120x40_the_table_widens_and_the_detail_takes_the_height() -> None:
    app = GpumixApp(job_hub(), interval_s=60)
    async with app.run_test(size=WIDE) as pilot:
        await started(pilot, app)
        table = app.query_one(GpuTable)
        await pilot.pause()
        assert table.virtual_size.width > 80 and table.region.width > 80
        lines = screen_text(app).splitlines()
        header = next(line for line in lines if "PCIe link" in line)
        for label in ("Fan", "SM MHz", "Mem MHz", "kJ", "Held by"):
            assert label in header, header
        row0 = next(line for line in lines if line.lstrip().startswith("0 "))
        sm_mhz = f"{app.snapshot['gpus'][0]['clock_sm_mhz']:.0f}"  # the wide table's SM clock column
        assert "RTX 3060 12G" in row0 and "power cap" in row0 and f" {sm_mhz} " in row0, row0
        detail = app.query_one("#detail", Static)
        assert detail.region.height >= 20
        text = str(detail.render())
        assert "util % (0–100, last" in text and "power W (0–170 W cap, last" in text and "PCIe rx (0–" in text
        await pilot.resize_terminal(*NARROW)  # back to 80 columns: the 80-column set again
        await wait_for(pilot, lambda: not table.wide, "the narrow columns")
        await wait_for(pilot, lambda: "Thr" in screen_text(app) and "Held by" not in screen_text(app), "the narrow header")


# -- marks -------------------------------------------------------------------------------------------


async def test_T_adds_its_tier_to_the_marks_and_u_clears_them() -> None:
    app = GpumixApp(job_hub(), interval_s=60)
    async with app.run_test(size=NARROW) as pilot:
        await started(pilot, app)
        table = app.query_one(GpuTable)
        uuids = [gpu["uuid"] for gpu in app.snapshot["gpus"]]
        await pilot.press("space")  # GPU 0
        await pilot.press(*["down"] * 7, "T")  # the 4090s
        assert table.marked == {uuids[0], uuids[7], uuids[8], uuids[9]}
        await wait_for(pilot, lambda: "*0 " in screen_text(app) and "*9 " in screen_text(app), "the marks drawn")
        await pilot.press("u")
        assert table.marked == set()
        await wait_for(pilot, lambda: "*" not in screen_text(app), "the marks gone from the table")


async def test_a_fit_keeps_the_marks_and_a_cap_change_that_used_them_says_it_cleared_them() -> None:
    hub = job_hub()
    app = GpumixApp(hub, interval_s=60)
    async with app.run_test(size=NARROW) as pilot:
        await started(pilot, app)
        table = app.query_one(GpuTable)
        await pilot.press("T")  # the 3060s
        marked = set(table.marked)
        assert len(marked) == 3
        await pilot.press("b")
        # the dialog with its buttons: pushed, a screen composes its children a moment later
        await wait_for(pilot, lambda: isinstance(app.screen, FitScreen) and app.screen.query("#apply"), "the fit dialog")
        await pilot.click("#apply")
        await wait_for(pilot, lambda: app.last_control_reply is not None, "the fit applied")
        assert app.last_control_reply["ok"] and table.marked == marked  # the fit was not for them
        messages = [n.message for n in app._notifications]
        assert not any("marks cleared" in m for m in messages)
        await pilot.press("c")
        await wait_for(pilot, lambda: isinstance(app.screen, PowerDialog), "the cap dialog")
        await pilot.press(*"150", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the cap's confirmation")
        await pilot.press("y")
        await wait_for(pilot, lambda: any("marks cleared" in n.message for n in app._notifications), "the toast")
        assert table.marked == set()
        assert [gpu.power_cap_w for gpu in hub.hardware.machine.gpus][:3] == [150.0] * 3
