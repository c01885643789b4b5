"""Power caps, budget fitting, findings and tiers in gpumix-top, under Textual's Pilot, on the simulator."""

from __future__ import annotations

from typing import Any

import pytest
from textual.widgets import Input, Label, Static

from gpumix.hub import Hub
from gpumix.tui.advice_screens import FindingsScreen, TiersScreen
from gpumix.tui.app import GpumixApp
from gpumix.tui.gpu_table import GpuTable
from gpumix.tui.power_screens import ConfirmScreen, FitScreen, PowerDialog, parse_watts
from tests.screen import screen_text, started
from tests.waiting import wait_until_async

SIZE = (100, 30)
DEFAULT_CAPS = [170.0] * 3 + [350.0] * 3 + [390.0] + [450.0] * 3


pytestmark = pytest.mark.usefixtures("tui_env")


async def wait_for(pilot, predicate, what: str, timeout_s: float = 5.0) -> Any:
    return await wait_until_async(predicate, timeout_s, what, pause=pilot.pause)


def caps(hub: Hub) -> list[float]:
    return [gpu.power_cap_w for gpu in hub.hardware.machine.gpus]


def messages(app: GpumixApp) -> list[str]:
    return [notification.message for notification in app._notifications]


async def select_row(pilot, index: int) -> None:
    for _ in range(index):
        await pilot.press("down")


async def open_dialog_for(pilot, app: GpumixApp, index: int) -> PowerDialog:
    await select_row(pilot, index)
    await pilot.press("c")
    dialog = await wait_for(pilot, lambda: isinstance(app.screen, PowerDialog) and app.screen, "the power dialog")
    await wait_for(pilot, lambda: "Power cap for" in screen_text(app), "the dialog drawn")
    return dialog


async def footer(pilot, app: GpumixApp) -> str:
    return await wait_for(pilot, lambda: next((line for line in screen_text(app).splitlines() if "Quit" in line), None),
                          "the footer")


def problem(app: GpumixApp) -> str:
    return str(app.screen.query_one("#problem", Label).render())


def test_parse_watts() -> None:
    gpus = [{"index": 7, "tier": "RTX 4090 24G", "power_limit_min_w": 150.0, "power_limit_max_w": 600.0}]
    assert parse_watts("300", gpus) == (300.0, "")
    assert parse_watts(" 300W ", gpus) == (300.0, "")
    assert parse_watts("700", gpus) == (None, "GPU 7 (RTX 4090 24G) takes 150–600 W")
    assert parse_watts("lots", gpus)[0] is None and "not a number" in parse_watts("lots", gpus)[1]
    unknown = [{**gpus[0], "power_limit_max_w": None}]
    assert parse_watts("300", unknown) == (None, "GPU 7 does not report its allowed range")


async def test_c_opens_the_dialog_for_the_selected_gpu(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app, tries=100)
        dialog = await open_dialog_for(pilot, app, 7)
        assert [g["index"] for g in dialog.gpus] == [7]
        text = screen_text(app)
        assert "Power cap for 1 GPU(s)" in text and "GPU 7 RTX 4090 24G" in text and "150–600 W" in text


async def test_out_of_range_shows_the_problem_and_apply_does_nothing(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app, tries=100)
        await open_dialog_for(pilot, app, 7)
        await pilot.press("7", "0", "0")
        await pilot.pause()
        assert "GPU 7 (RTX 4090 24G) takes 150–600 W" in problem(app)
        await pilot.click("#apply")
        await pilot.pause()
        assert isinstance(app.screen, PowerDialog)  # still here: nothing was sent
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, PowerDialog)
        assert "150–600 W" in problem(app)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, PowerDialog | ConfirmScreen)
        assert caps(demo_hub) == DEFAULT_CAPS and app.last_control_reply is None


async def test_escape_cancels_the_dialog(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app, tries=100)
        await open_dialog_for(pilot, app, 3)
        await pilot.press("3", "0", "0", "escape")
        await wait_for(pilot, lambda: app.screen is app.screen_stack[0], "the dialog to close")
        assert caps(demo_hub) == DEFAULT_CAPS and app.last_control_reply is None


async def test_a_valid_cap_asks_first_and_cancel_changes_nothing(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app, tries=100)
        await open_dialog_for(pilot, app, 7)
        await pilot.press("3", "0", "0")
        await pilot.pause()
        assert problem(app) == ""
        await pilot.click("#apply")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
        assert "Set GPU(s) 7 to cap 300 W?" in screen_text(app)
        await pilot.click("#no")
        await wait_for(pilot, lambda: app.screen is app.screen_stack[0], "the confirmation to close")
        assert caps(demo_hub) == DEFAULT_CAPS and app.last_control_reply is None


async def test_confirmed_cap_changes_the_card_and_notifies(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app, tries=100)
        await open_dialog_for(pilot, app, 7)
        await pilot.press("3", "0", "0", "enter")  # enter in the field = Apply
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
        await pilot.press("y")
        reply = await wait_for(pilot, lambda: app.last_control_reply, "the hub's reply")
        assert reply["ok"], reply
        assert caps(demo_hub)[7] == 300.0 and caps(demo_hub)[:7] == DEFAULT_CAPS[:7]
        assert demo_hub.snapshot()["gpus"][7]["power_cap_w"] == 300.0
        assert any("GPU 7 450→300 W" in message for message in messages(app))


async def test_reset_to_default_path(demo_hub: Hub) -> None:
    demo_hub.control({"type": "power", "action": "set", "gpus": [8], "watts": 250})
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app, tries=100)
        await open_dialog_for(pilot, app, 8)
        await pilot.click("#reset")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
        assert "Set GPU(s) 8 to the default cap?" in screen_text(app)
        await pilot.click("#yes")
        reply = await wait_for(pilot, lambda: app.last_control_reply, "the hub's reply")
        assert reply["ok"] and caps(demo_hub) == DEFAULT_CAPS
        assert any("GPU 8 250→450 W" in message for message in messages(app))


async def test_space_marks_two_gpus_and_c_targets_both(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app, tries=100)
        table = app.query_one(GpuTable)
        await select_row(pilot, 3)
        await pilot.press("space", "down", "down", "space")
        uuids = [g["uuid"] for g in demo_hub.snapshot()["gpus"]]
        assert table.marked == {uuids[3], uuids[5]}
        assert "*3" in screen_text(app) and "*5" in screen_text(app)
        await pilot.press("c")
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, PowerDialog) and app.screen, "the dialog")
        assert sorted(g["index"] for g in dialog.gpus) == [3, 5]
        assert "Power cap for 2 GPU(s)" in screen_text(app)
        await pilot.press("2", "8", "0", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
        assert "Set GPU(s) 3, 5 to cap 280 W?" in screen_text(app)
        await pilot.press("y")
        reply = await wait_for(pilot, lambda: app.last_control_reply, "the hub's reply")
        assert reply["ok"]
        assert caps(demo_hub)[3] == caps(demo_hub)[5] == 280.0 and caps(demo_hub)[4] == 350.0
        assert table.marked == set()  # marks are cleared once applied


async def test_space_twice_unmarks(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app, tries=100)
        await pilot.press("space", "space")
        assert app.query_one(GpuTable).marked == set()


async def test_mark_tier_marks_the_whole_tier(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app, tries=100)
        await select_row(pilot, 8)
        await pilot.press("T")
        gpus = demo_hub.snapshot()["gpus"]
        assert app.query_one(GpuTable).marked == {g["uuid"] for g in gpus[7:10]}
        await pilot.press("c")
        dialog = await wait_for(pilot, lambda: isinstance(app.screen, PowerDialog) and app.screen, "the dialog")
        assert sorted(g["index"] for g in dialog.gpus) == [7, 8, 9]


async def test_a_value_out_of_range_for_one_marked_gpu_is_refused_in_the_dialog(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app, tries=100)
        await pilot.press("space")  # GPU 0, a 3060: 100-200 W
        await select_row(pilot, 7)
        await pilot.press("space", "c")
        await wait_for(pilot, lambda: isinstance(app.screen, PowerDialog), "the dialog")
        await pilot.press("2", "5", "0", "enter")
        await pilot.pause()
        assert isinstance(app.screen, PowerDialog) and "GPU 0 (RTX 3060 12G) takes 100–200 W" in problem(app)
        assert caps(demo_hub) == DEFAULT_CAPS


async def test_b_proposes_a_fit_and_cancel_changes_nothing(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app, tries=100)
        await pilot.press("b")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, FitScreen) and app.screen, "the fit proposal")
        assert screen.proposal["ok"] and screen.proposal["fit"]["budget_w"] == 2800
        text = str(screen.query_one("#fit-text", Static).render())
        assert "caps 3300 → 2800 W (budget 2800 W)" in text and "proposal only" in text
        assert "GPU 7 RTX 4090 24G" in text
        await pilot.click("#cancel")
        await wait_for(pilot, lambda: app.screen is app.screen_stack[0], "the fit screen to close")
        assert caps(demo_hub) == DEFAULT_CAPS and app.last_control_reply is None


async def test_b_then_apply_fits_the_caps_under_the_budget(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app, tries=100)
        await pilot.press("b")
        await wait_for(pilot, lambda: isinstance(app.screen, FitScreen), "the fit proposal")
        await pilot.click("#apply")
        reply = await wait_for(pilot, lambda: app.last_control_reply, "the hub's reply")
        assert reply["ok"], reply
        assert sum(caps(demo_hub)) <= 2800
        for gpu in demo_hub.hardware.machine.gpus:
            assert gpu.spec.model.power_limit_min_w <= gpu.power_cap_w <= gpu.spec.model.power_limit_max_w
        assert sum(g["power_cap_w"] for g in demo_hub.snapshot()["gpus"]) <= 2800
        # once fitted, another `b` says so instead of proposing nothing
        await pilot.press("b")
        await wait_for(pilot, lambda: "the caps already fit the budget" in messages(app), "the notice")
        assert not isinstance(app.screen, FitScreen)


async def test_f_shows_the_findings(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app, tries=100)
        await pilot.press("f")
        screen = await wait_for(pilot, lambda: isinstance(app.screen, FindingsScreen) and app.screen, "the findings")
        await pilot.pause()
        text = str(screen.query_one("#findings-text", Static).render())
        assert "P2P between GPUs is unavailable" in text
        assert "Power caps add up to more than the budget" in text and "▲ WARN" in text
        await pilot.press("f")
        await pilot.pause()
        assert app.screen is app.screen_stack[0]


async def test_g_shows_the_tiers(demo_hub: Hub) -> None:
    from tests.test_advisor import DEMO_SPEEDS, add_ranks

    add_ranks(demo_hub, DEMO_SPEEDS)
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app, tries=100)
        await pilot.press("g")
        await wait_for(pilot, lambda: isinstance(app.screen, TiersScreen), "the tiers")
        await pilot.pause()
        text = screen_text(app)
        assert "RTX 3060 12G" in text and "RTX 4090 24G" in text and "straggler" in text
        assert "underutilized" in text
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.screen_stack[0]


async def test_readonly_hides_and_ignores_every_control(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60, readonly=True)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app, tries=100)
        keys = await footer(pilot, app)
        assert "Advice" in keys and "Cap" not in keys and "Budget" not in keys and "Split" not in keys
        # views still open: "f" is handled after the control keys, so once the findings show
        # those keys were handled too, and none opened a screen or changed anything
        await pilot.press("space", "T", "c", "b", "f")
        await wait_for(pilot, lambda: isinstance(app.screen, FindingsScreen), "the findings")
        assert len(app.screen_stack) == 2
        assert app.query_one(GpuTable).marked == set()
        assert caps(demo_hub) == DEFAULT_CAPS and app.last_control_reply is None


async def test_the_footer_shows_the_controls_when_not_readonly(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app, tries=100)
        keys = await footer(pilot, app)
        assert "Cap" in keys and "Budget" in keys


async def test_a_refused_control_is_shown_as_an_error(demo_hub: Hub) -> None:
    demo_hub.hardware.machine.faults[(7, "nvmlDeviceSetPowerManagementLimit")] = 4  # NVML_ERROR_NO_PERMISSION
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app, tries=100)
        await open_dialog_for(pilot, app, 7)
        await pilot.press("3", "0", "0", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
        await pilot.press("y")
        reply = await wait_for(pilot, lambda: app.last_control_reply, "the hub's reply")
        assert not reply["ok"] and "CAP_SYS_ADMIN" in reply["message"]
        assert any("CAP_SYS_ADMIN" in message for message in messages(app))
        assert caps(demo_hub) == DEFAULT_CAPS


async def test_input_field_is_focused_in_the_dialog(demo_hub: Hub) -> None:
    app = GpumixApp(demo_hub, interval_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await started(pilot, app, tries=100)
        await open_dialog_for(pilot, app, 0)
        await pilot.press("1", "5", "0")
        assert app.screen.query_one(Input).value == "150"
